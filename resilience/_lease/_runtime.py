"""What truly differs between the sync and async shells: thread timers and the shared renewer.

- `sync_call_later`: a timer for sync code. With the system clock it always uses the shared
  timer thread, never the event loop of the calling thread (a sync execution started from a
  coroutine blocks that loop, so a loop timer would never fire while the lease is held).
- `RENEWER`: the one background worker thread that performs the renewal I/O (and the loss
  notifications) of every sync lease in the process. Lease events only *enqueue* work here,
  so a renewal that hangs never delays the timer thread, and so never delays any lease's loss
  detection (see `_lease.Scheduler`).

With the existing timer thread that makes two shared background threads in all (DESIGN §3).
After `os.fork()` the child starts with an empty worker and a new generation number: leases
inherited from the parent compare their generation and do nothing.
"""

from __future__ import annotations

import collections
import logging
import threading
from typing import TYPE_CHECKING

from resilience._time import SystemTimeProvider
from resilience._timers import TIMER_THREAD

if TYPE_CHECKING:
    from collections.abc import Callable

    from resilience._time import TimeProvider, TimerHandle

__all__ = ["RENEWER", "Renewer", "fork_generation", "sync_call_later"]

_logger = logging.getLogger("resilience")


def sync_call_later(time_provider: TimeProvider, delay: float, callback: Callable[[], object]) -> TimerHandle:
    """`call_later` for sync code: never on the calling thread's event loop."""
    if isinstance(time_provider, SystemTimeProvider):
        return TIMER_THREAD.call_later(delay, callback)
    return time_provider.call_later(delay, callback)


class Renewer:
    """One lazily started daemon thread running queued jobs (renewals, loss notifications) in order."""

    def __init__(self) -> None:
        self._reset()

    def _reset(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._jobs: collections.deque[Callable[[], object]] = collections.deque()
        self._thread: threading.Thread | None = None
        self._busy = False

    def submit(self, job: Callable[[], object]) -> None:
        """Run `job()` on the renewer thread (exceptions are logged)."""
        with self._cond:
            self._jobs.append(job)
            if self._thread is None:
                self._thread = threading.Thread(target=self._serve, name="resilience-lease-renewer", daemon=True)
                self._thread.start()
            else:
                self._cond.notify()

    def wait_idle(self, timeout: float = 5.0) -> bool:
        """Block until no job is queued or running (real time); for tests and benchmarks."""
        with self._cond:
            return self._cond.wait_for(lambda: not self._jobs and not self._busy, timeout)

    @property
    def started(self) -> bool:
        """Whether the worker thread exists."""
        return self._thread is not None

    def _serve(self) -> None:
        cond = self._cond
        jobs = self._jobs
        while True:
            with cond:
                self._busy = False
                while not jobs:
                    cond.notify_all()  # wake `wait_idle`
                    cond.wait()
                job = jobs.popleft()
                self._busy = True
            try:
                job()
            except Exception:
                _logger.exception("a lease renewal job raised")


RENEWER = Renewer()

_generation = 0


def fork_generation() -> int:
    """A number that changes in a child process after `os.fork()`."""
    return _generation


def _after_fork_in_child() -> None:  # pragma: no cover - runs in a forked child
    global _generation  # noqa: PLW0603 - process-wide by nature
    _generation += 1
    RENEWER._reset()
