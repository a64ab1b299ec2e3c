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

from resilience.telemetry._source import CAPTURES

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

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

    def take(self) -> Callable[[], object] | None:
        callback, self._callback = self._callback, None
        return callback


class FakeTimeProvider:
    """A clock that moves only when told to (or, with `auto_advance`, when something sleeps).

    - `advance(seconds)` moves the clock forward, running every `call_later` callback and waking
      every sleeper that falls due, in deadline order, with the clock set to each deadline.
    - `auto_advance=True`: `sleep`/`sleep_async` move the clock by the slept time instead of
      blocking, so a test that "waits" ten minutes finishes at once. Meant for single-flow
      tests; when background work (lease renewal) shares the clock, advance by hand.
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
        while True:
            with self._lock:
                if not self._timers or self._timers[0][0] > target:
                    self._now = max(self._now, target)
                    return
                when, _, timer = heapq.heappop(self._timers)
                self._now = max(self._now, when)
                callback = timer.take()
            if callback is not None:
                try:
                    callback()
                except Exception:
                    _logger.exception("a timer callback raised")

    def sleep(self, seconds: float) -> None:
        """Advance (auto mode) or block until another thread advances the clock past the deadline."""
        if self.auto_advance:
            self.advance(max(seconds, 0.0))
            return
        woken = threading.Event()
        timer = self.call_later(seconds, woken.set)
        try:
            woken.wait()
        finally:
            timer.cancel()

    async def sleep_async(self, seconds: float) -> None:
        """Advance (auto mode) or suspend until the clock is advanced past the deadline."""
        if self.auto_advance:
            self.advance(max(seconds, 0.0))
            await asyncio.sleep(0)
            return
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()

        def wake() -> None:
            loop.call_soon_threadsafe(_resolve, future)

        timer = self.call_later(seconds, wake)
        try:
            await future
        finally:
            timer.cancel()

    def __repr__(self) -> str:
        return f"FakeTimeProvider(now={self._now!r}, auto_advance={self.auto_advance!r})"


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


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
    CAPTURES.add(listener)
    try:
        yield events
    finally:
        CAPTURES.remove(listener)
