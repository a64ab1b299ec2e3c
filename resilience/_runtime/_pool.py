"""One thread-pool implementation for the whole library: bounded, idle exit, stall policy.

A pool has one thread while its jobs flow. When jobs wait, it starts threads at once up to
its `eager` count, and beyond that one more each time no job started or ended for its `stall`
time, up to its bound `size`; a thread that stays idle for `idle` seconds ends. Every job's
exceptions, including `SystemExit` and `KeyboardInterrupt`, are logged: a pool thread never
dies of a job. The lease engine (`_lease/_workers.py`) and sync hedging run on pools.
"""

from __future__ import annotations

import collections
import logging
import threading
from typing import TYPE_CHECKING

from resilience._runtime._threads import run_logged, start_thread
from resilience._runtime._timers import TIMER_THREAD

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["IDLE_EXIT", "STALL", "Pool", "run_logged"]

_logger = logging.getLogger("resilience")

IDLE_EXIT = 30.0
"""Seconds a pool thread waits for work before it ends (the default)."""
STALL = 0.0
"""The default stall: none (every thread up to the bound starts as soon as jobs wait)."""


class Pool:
    """Up to `size` daemon threads running queued jobs; threads start on demand and end when idle."""

    def __init__(
        self, name: str, size: int, stall: float = STALL, *, eager: int | None = None, idle: float = IDLE_EXIT
    ) -> None:
        self.name = name
        self.size = size
        self.stall = stall
        self.idle = idle
        """Seconds a thread waits for work before it ends."""
        self.eager = (size if stall <= 0 else 1) if eager is None else eager
        """Threads started as soon as jobs wait; beyond them, one per `stall` without progress."""
        self._reset()

    def _reset(self) -> None:
        lock = threading.Lock()
        # Two conditions on one lock: idle pool threads wait on `_cond` for jobs, `wait_idle` on
        # `_quiet`. Waking `wait_idle` on the threads' own condition woke the other idle threads,
        # which woke each other in turn: two idle threads spun forever on the CPU and never
        # reached their idle exit.
        self._cond = threading.Condition(lock)
        self._quiet = threading.Condition(lock)
        self._jobs: collections.deque[Callable[[], object]] = collections.deque()
        self._threads = 0
        self._idle = 0
        self._busy = 0
        self._progress = 0.0  # when a job last started or ended
        self._watching = False  # a stall check is armed

    @property
    def threads(self) -> int:
        """How many threads the pool has now."""
        return self._threads

    def submit(self, job: Callable[[], object], *, urgent: bool = False) -> None:
        """Run `job()` on a pool thread (its exceptions are logged).

        `urgent`: a caller waits for it (a final release): with no thread idle, one more starts
        at once (up to the bound), as if the pool had stalled.
        """
        watch = False
        with self._cond:
            self._jobs.append(job)
            if self._idle > len(self._jobs) - 1:
                self._cond.notify()
                return
            if self._threads < self.eager or (urgent and self._threads < self.size):
                self._start()
            elif self._threads < self.size and not self._watching:
                self._watching = watch = True
        if watch:
            TIMER_THREAD.call_later(self.stall, self._check_stall)

    def _start(self) -> None:
        # Under the condition's lock.
        self._threads += 1
        self._progress = TIMER_THREAD.monotonic()
        spare = self._threads if self._threads > self.eager > 1 else 0
        start_thread(self._serve, spare, name=f"resilience-{self.name}")

    def _check_stall(self) -> None:
        """On the timer thread: jobs still wait and nothing moved for `stall` seconds: add a thread."""
        with self._cond:
            self._watching = False
            if not self._jobs or self._idle or self._threads >= self.size:
                return
            if TIMER_THREAD.monotonic() - self._progress >= self.stall:
                self._start()
                if self._threads >= self.size:
                    return
            self._watching = True
        TIMER_THREAD.call_later(self.stall, self._check_stall)

    def withdraw(self, job: Callable[[], object]) -> bool:
        """Remove `job` if no thread took it yet; True if it will never run."""
        with self._cond:
            try:
                self._jobs.remove(job)
            except ValueError:
                return False
            return True

    def wait_idle(self, timeout: float = 5.0) -> bool:
        """Block until no job is queued or running (real time); for tests and benchmarks."""
        with self._quiet:
            return self._quiet.wait_for(lambda: not self._jobs and not self._busy, timeout)

    def _serve(self, spare: int = 0) -> None:
        if spare:  # said here, not on the timer thread: a log handler is user code
            _logger.warning(
                "every thread of %s is busy for %.1f s and jobs wait: spare thread %d of %d started"
                " (a callback that never returns holds its thread for ever)",
                self.name,
                self.stall,
                spare,
                self.size,
            )
        cond = self._cond
        jobs = self._jobs
        while True:
            with cond:
                while not jobs:
                    self._idle += 1
                    woken = cond.wait(self.idle)
                    self._idle -= 1
                    if not woken and not jobs:
                        self._threads -= 1
                        return
                job = jobs.popleft()
                self._busy += 1
                self._progress = TIMER_THREAD.monotonic()
            try:
                run_logged(job, f"a job on {self.name}")
            finally:
                with cond:
                    self._busy -= 1
                    self._progress = TIMER_THREAD.monotonic()
                    if not jobs and not self._busy:
                        self._quiet.notify_all()
