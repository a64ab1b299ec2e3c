"""Helpers for testing code that uses `resilience`: a controllable clock and event capture.

`FakeTimeProvider` replaces the real clock in a pipeline (`PipelineBuilder(time_provider=...)`)
so that tests of retries, timeouts, circuits and leases never really sleep. `capture_events()`
records every telemetry event for assertions.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import logging
import random as _random
import threading
from typing import TYPE_CHECKING, Final

from resilience._time import wait_event, wait_future
from resilience.telemetry._source import CAPTURES

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from typing import Any

    from resilience.telemetry._event import TelemetryEvent

__all__ = ["FakeTimeProvider", "capture_events"]

_logger = logging.getLogger("resilience")


class _FakeTimer:
    __slots__ = ("_callback", "when")

    def __init__(self, when: float, callback: Callable[[], object]) -> None:
        self.when = when
        self._callback: Callable[[], object] | None = callback

    def cancel(self) -> None:
        self._callback = None


class FakeTimeProvider:
    """A clock that moves only when told to (or, with `auto_advance`, when something waits on it).

    - `advance(seconds)` moves the clock forward, running every `call_later` callback and waking
      every sleeper that falls due, in deadline order, with the clock set to each deadline.
    - `auto_advance=True`: `sleep`/`sleep_async` move the clock by the slept time instead of
      blocking, and `wait`/`wait_async` move it until what they wait for happens or the
      timeout is reached, so a test that "waits" ten minutes finishes at once. Meant for
      single-flow tests; when background work (lease renewal) shares the clock, advance by hand.
    - `seed` makes `random()` (and so jitter) deterministic.

    Thread-safe: a sleeper in one thread is woken by `advance` from another.
    """

    def __init__(self, start: float = 0.0, *, auto_advance: bool = False, seed: int | None = None) -> None:
        self._now = float(start)
        self.auto_advance: Final = auto_advance
        self._random = _random.Random(seed)  # noqa: S311 - jitter, not cryptography
        self._lock = threading.Lock()
        self._timers: list[tuple[float, int, _FakeTimer]] = []
        self._seq = itertools.count()

    def monotonic(self) -> float:
        """The fake clock, in seconds."""
        return self._now

    def time(self) -> float:
        """The same fake clock (there is no separate wall clock)."""
        return self._now

    def random(self) -> _random.Random:
        """The provider's random source, seeded with `seed`."""
        return self._random

    def call_later(self, delay: float, callback: Callable[[], object]) -> _FakeTimer:
        """Run `callback` when the clock reaches now + `delay` (on the thread that advances it)."""
        with self._lock:
            timer = _FakeTimer(self._now + max(delay, 0.0), callback)
            heapq.heappush(self._timers, (timer.when, next(self._seq), timer))
        return timer

    @property
    def pending_timers(self) -> int:
        """How many timers (including sleepers) are scheduled and not cancelled."""
        with self._lock:
            return sum(1 for _, _, timer in self._timers if timer._callback is not None)

    def advance(self, seconds: float) -> None:
        """Move the clock forward by `seconds`, firing what falls due; negative raises `ValueError`."""
        if seconds < 0:
            msg = f"the fake clock cannot go back (advance({seconds}))"
            raise ValueError(msg)
        with self._lock:
            target = self._now + seconds
        while self._step(target):
            pass

    def _step(self, target: float) -> bool:
        """Fire the next timer due by `target` (True), or move the clock to `target` (False)."""
        with self._lock:
            if not self._timers or self._timers[0][0] > target:
                self._now = max(self._now, target)
                return False
            when, _, timer = heapq.heappop(self._timers)
            self._now = max(self._now, when)
            callback, timer._callback = timer._callback, None
        if callback is not None:
            try:
                callback()
            except Exception:
                _logger.exception("a timer callback raised")
        return True

    def sleep(self, seconds: float) -> None:
        """Advance (auto mode) or block until another thread advances the clock past the deadline."""
        self.wait(threading.Event(), seconds)  # nothing sets the event: the wait lasts `seconds`

    async def sleep_async(self, seconds: float) -> None:
        """Advance (auto mode) or suspend until the clock is advanced past the deadline."""
        if self.auto_advance:
            self.advance(max(seconds, 0.0))
            await asyncio.sleep(0)
            return
        await self.wait_async(asyncio.get_running_loop().create_future(), seconds)

    def wait(self, event: threading.Event, timeout: float) -> bool:
        """Block until `event` is set or the clock reaches the timeout.

        In auto mode the wait moves the clock instead, timer by timer, and stops at the one
        that sets `event`.
        """
        if not self.auto_advance:
            return wait_event(self, event, timeout)
        target = self._now + max(timeout, 0.0)
        while not event.is_set() and self._step(target):
            pass
        return event.is_set()

    async def wait_async(self, future: asyncio.Future[Any], timeout: float) -> bool:
        """Suspend until `future` is done or the clock reaches the timeout.

        In auto mode the wait moves the clock instead, timer by timer, letting the loop run
        between them, and stops once `future` is done.
        """
        if not self.auto_advance:
            return await wait_future(self, future, timeout)
        target = self._now + max(timeout, 0.0)
        # A wake-up lands through the loop, so the loop runs between two timers.
        while not future.done() and self._step(target):  # noqa: ASYNC110
            await asyncio.sleep(0)
        return future.done()

    def __repr__(self) -> str:
        return f"FakeTimeProvider(now={self._now!r}, auto_advance={self.auto_advance!r})"


@contextlib.contextmanager
def capture_events() -> Iterator[list[TelemetryEvent]]:
    """Record every telemetry event emitted while the block runs, from any pipeline or thread.

    Yields the list the events are appended to, in emission order. Suppressed events
    (`Severity.NONE` from a severity provider) are not recorded, as for any listener.

        with capture_events() as events:
            pipeline.execute(work)
        assert [e.name for e in events] == ["PipelineExecuting", "PipelineExecuted"]
    """
    events: list[TelemetryEvent] = []
    listener = events.append  # one bound method, so that remove() finds this very object
    CAPTURES.listeners = (*CAPTURES.listeners, listener)
    try:
        yield events
    finally:
        CAPTURES.listeners = tuple(item for item in CAPTURES.listeners if item is not listener)
