"""One shared timer thread for every `call_later` made outside an event loop.

A heap of deadlines served by a single daemon thread, so that ten thousand leases or timeouts
cost ten thousand heap entries, not ten thousand threads. Callbacks must be quick: they run
on the timer thread one after another (anything slow belongs on a worker).
"""

from __future__ import annotations

import heapq
import itertools
import sys
import threading
import time
import types
from typing import TYPE_CHECKING

from resilience._runtime._threads import on_fork_in_child, run_logged, start_thread

if TYPE_CHECKING:
    from collections.abc import Callable

_COMPACT_AT = 1024
MAX_DELAY = 1e9
"""Longer delays (infinity too) are clamped to this: about 31.7 years, never reached."""
_MAX_WAIT = 3600.0
"""The timer thread wakes at least this often: `Condition.wait` refuses more than TIMEOUT_MAX."""


class ThreadTimerHandle:
    """A scheduled callback on the shared timer thread; `cancel()` is idempotent."""

    __slots__ = ("_callback", "_owner", "when")

    def __init__(self, owner: TimerThread, when: float, callback: Callable[[], object]) -> None:
        self.when = when
        self._owner = owner
        self._callback: Callable[[], object] | None = callback

    def cancel(self) -> None:
        """Forget the callback; its heap entry is dropped lazily."""
        if self._callback is not None:
            self._callback = None
            self._owner.cancelled += 1  # approximate under races; it only triggers a compaction

    @property
    def cancelled(self) -> bool:
        """True once cancelled or run."""
        return self._callback is None

    def _run(self) -> None:
        callback, self._callback = self._callback, None
        if callback is not None:
            run_logged(callback, "a timer callback")  # on the timer thread: everything is logged


class TimerThread:
    """A lazily started daemon thread running callbacks at deadlines on the real monotonic clock."""

    def __init__(self, name: str = "resilience-timer") -> None:
        self._name = name
        # The real clock, taken once and kept where a clock-patching tool cannot reach it:
        # freezegun rewrites `time.monotonic` in every module, but its fake answers the real
        # time to a caller a few frames below `threading`. A deadline computed with the fake
        # (a frozen year 2030) and waited for with the real clock would never come: one
        # `call_later` during a test's freeze would leave the lease scheduler armed forever,
        # and every sync lease of the process unrenewed and unwatched after it.
        # `time.monotonic` as the interpreter provides it, even if this module is imported
        # during a freeze (freezegun's fake is a Python function, not a builtin).
        self.monotonic: Callable[[], float] = time.monotonic
        if not isinstance(self.monotonic, types.BuiltinFunctionType):
            real = getattr(sys.modules.get("freezegun.api"), "real_monotonic", None)
            if callable(real):
                self.monotonic = real
        self._seq = itertools.count()
        self._reset()

    def _reset(self) -> None:
        """No thread, nothing scheduled: a new timer's state, and a forked child's.

        In the child the thread did not survive the fork, and the inherited timers belong to the parent.
        """
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._heap: list[tuple[float, int, ThreadTimerHandle]] = []
        self._thread: threading.Thread | None = None
        self.cancelled = 0

    def call_later(self, delay: float, callback: Callable[[], object]) -> ThreadTimerHandle:
        """Run `callback` on the timer thread after `delay` seconds of real time.

        NaN and negative delays are 0; more than `MAX_DELAY` is `MAX_DELAY`.
        """
        if not delay > 0:  # NaN included
            delay = 0.0
        handle = ThreadTimerHandle(self, self.monotonic() + min(delay, MAX_DELAY), callback)
        # The condition's own lock, entered directly: `with self._cond` goes through two
        # Python-level calls (Condition.__enter__/__exit__), 0.2 us of a 1.4 us schedule+cancel.
        with self._lock:
            if self.cancelled > _COMPACT_AT and self.cancelled * 2 > len(self._heap):
                # Long timeouts that are almost always cancelled would otherwise pile up.
                self._heap = [entry for entry in self._heap if not entry[2].cancelled]
                heapq.heapify(self._heap)
                self.cancelled = 0
            heapq.heappush(self._heap, (handle.when, next(self._seq), handle))
            if self._thread is None:
                self._thread = start_thread(self._serve, name=self._name)
            elif self._heap[0][2] is handle:
                self._cond.notify()
        return handle

    def is_current(self) -> bool:
        """Whether the calling thread is this timer thread."""
        return self._thread is not None and threading.current_thread() is self._thread

    def _serve(self) -> None:
        while True:
            with self._cond:
                while True:
                    while self._heap and self._heap[0][2].cancelled:
                        heapq.heappop(self._heap)
                    if not self._heap:
                        self._cond.wait()
                    elif (wait := self._heap[0][0] - self.monotonic()) > 0:
                        self._cond.wait(min(wait, _MAX_WAIT))
                    else:
                        handle = heapq.heappop(self._heap)[2]
                        break
            handle._run()


TIMER_THREAD = TimerThread()
on_fork_in_child(TIMER_THREAD._reset)
