"""The small thread pool shared by every sync hedged execution of the process.

Sync hedging runs the original attempt on the caller's thread and each extra attempt here.
At most `POOL_SIZE` threads exist, made on demand and ended after `IDLE_SECONDS` without work;
when all are busy, attempts queue (and one whose execution finished, or whose caller is free
to run it itself, before a thread took it is withdrawn). A thread never runs more than one
attempt at a time, so the threads in use are exactly the hedged attempts in flight. After
`os.fork()` the child starts with an empty pool.
"""

from __future__ import annotations

import collections
import logging
import threading
from typing import TYPE_CHECKING

from resilience._runtime._threads import on_fork_in_child, start_thread

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["IDLE_SECONDS", "POOL", "POOL_SIZE", "HedgingPool"]

_logger = logging.getLogger("resilience")

POOL_SIZE = 16
"""Threads at most, for every sync hedged attempt of the process."""
IDLE_SECONDS = 30.0
"""A thread with nothing to do for this long ends."""


class HedgingPool:
    """A bounded pool of daemon threads running quick-to-hand-over jobs, first in first out."""

    def __init__(self, size: int = POOL_SIZE, idle_seconds: float = IDLE_SECONDS) -> None:
        self.size = size
        self._idle_seconds = idle_seconds
        self._reset()

    def _reset(self) -> None:
        self._lock = threading.Condition(threading.Lock())
        self._jobs: collections.deque[Callable[[], object]] = collections.deque()
        self._threads = 0
        self._idle = 0

    @property
    def threads(self) -> int:
        """How many pool threads exist now."""
        return self._threads

    def submit(self, job: Callable[[], object]) -> None:
        """Run `job()` on a pool thread, as soon as one is free (its exceptions are its own)."""
        with self._lock:
            self._jobs.append(job)
            if self._idle >= len(self._jobs):
                self._lock.notify()
                return
            if self._threads >= self.size:
                return  # queued: the next thread to finish its job takes it
            self._threads += 1
        start_thread(self._work, name="resilience-hedging")

    def withdraw(self, job: Callable[[], object]) -> bool:
        """Remove `job` if no thread took it yet; True if it will never run."""
        with self._lock:
            try:
                self._jobs.remove(job)
            except ValueError:
                return False
            return True

    def _work(self) -> None:
        lock = self._lock
        while True:
            with lock:
                while not self._jobs:
                    self._idle += 1
                    woken = lock.wait(self._idle_seconds)
                    self._idle -= 1
                    if not woken and not self._jobs:
                        self._threads -= 1
                        return
                job = self._jobs.popleft()
            try:
                job()
            except BaseException:  # a job reports its own outcome; this is a bug guard
                _logger.exception("a hedging pool job raised")


POOL = HedgingPool()
"""The process's one hedging pool."""

on_fork_in_child(POOL._reset)  # the parent's threads do not exist in a child
