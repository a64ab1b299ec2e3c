"""Background threads of the sync lease runtime: small bounded pools and per-lease strands.

The timer thread only decides and enqueues. The work it hands on runs here:

- store calls (batches of renewals, best-effort releases) on the store's own `Pool`
  (`store_pool`): a store whose calls hang stalls only its own leases, whose deadlines still
  fire on the timer;
- user code (signal callbacks, `on_lock_lost`, `on_renew_error`, telemetry listeners) on the
  shared `CALLBACKS` pool, each lease's callbacks in order on its own `Strand`: a slow callback
  holds one thread, and the next lease's callbacks start on another. The library's own
  wake-ups never run here (they run where the signal aborts: `Signal.add_wakeup`), so user
  callbacks that never return cannot keep a timeout, a retry sleep or a wait from ending.

A pool has one thread while its jobs flow. When jobs wait, it starts threads at once up to
its `eager` count (callbacks: `CALLBACK_THREADS`; a store: one), and beyond that one more each
time no job started or ended for its `stall` time (a store call that hangs: `STORE_STALL`;
callbacks that block: `CALLBACK_STALL`), up to its bound; a thread that stays idle for
`IDLE_EXIT` seconds ends. Holding 10,000
leases on one store thus costs the timer thread, one store thread and (once a callback runs)
one callback thread while nothing is slow. Every job's exceptions, including
`SystemExit` and `KeyboardInterrupt`, are logged: a pool thread never dies of a job.
"""

from __future__ import annotations

import collections
import logging
import threading
import weakref
from typing import TYPE_CHECKING

from resilience._runtime._pool import Pool, run_logged
from resilience._runtime._threads import on_fork_in_child
from resilience._runtime._timers import TIMER_THREAD

if TYPE_CHECKING:
    from collections.abc import Callable, Hashable

__all__ = ["CALLBACKS", "Strand", "off_timer_thread", "store_pool", "wait_idle"]

_logger = logging.getLogger("resilience")

STORE_STALL = 0.05
"""The same for a store's pool: a batch of renewals may take a few milliseconds (one thread
serves thousands of leases while the store answers); a call that hangs adds a thread soon."""
STORE_THREADS = 4
"""Threads at most per store (calls that hang beyond that queue behind them)."""
CALLBACK_THREADS = 16
"""Threads the callback pool starts as soon as callbacks wait (callbacks are rare, a loss or a
failed renewal; one that waits behind a slow one would delay its lease's news)."""
CALLBACK_STALL = 0.5
"""With every callback thread busy and callbacks waiting, seconds without one ending before a
spare thread starts: callbacks that block (a bug in user code) delay the others this long."""
CALLBACK_THREADS_MAX = 64
"""Threads at most running user callbacks, spares included (beyond that, callbacks queue)."""


class Strand:
    """Jobs of one lease, run one at a time and in order on a pool (never two at once).

    Invariants (under `_lock`): `_scheduled` while a `_drain` sits in the pool's queue, not yet
    started; `_active` while one thread (a pool thread, or a caller in `join`) runs the jobs.
    """

    __slots__ = ("_active", "_idle", "_jobs", "_lock", "_pool", "_scheduled")

    def __init__(self, pool: Pool) -> None:
        self._pool = pool
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._jobs: collections.deque[Callable[[], object]] = collections.deque()
        self._scheduled = False
        self._active = False

    def submit(self, job: Callable[[], object]) -> None:
        """Run `job()` after the strand's earlier jobs."""
        with self._lock:
            self._jobs.append(job)
            if self._active or self._scheduled:
                return
            self._scheduled = True
        self._pool.submit(self._drain)

    def join(self) -> None:
        """Run the queued jobs on the calling thread, after the job running elsewhere (if any) ends.

        What a holder does before it returns: its callbacks never wait for a pool thread.
        """
        with self._lock:
            self._idle.wait_for(lambda: not self._active)
            if not self._jobs:
                return
            self._active = True
        self._run()

    def _drain(self) -> None:
        with self._lock:
            self._scheduled = False
            if self._active or not self._jobs:
                return
            self._active = True
        self._run()

    def _run(self) -> None:
        try:
            while True:
                with self._lock:
                    if not self._jobs:
                        return
                    job = self._jobs.popleft()
                run_logged(job, "a lease callback")
        finally:
            # Also when a Ctrl-C on the main thread (a holder in `join`) ends the run early:
            # the strand is never left active without a runner, and its other jobs run on the pool.
            with self._lock:
                self._active = False
                self._idle.notify_all()
                leftover = bool(self._jobs) and not self._scheduled
                self._scheduled = self._scheduled or leftover
            if leftover:
                self._pool.submit(self._drain)


CALLBACKS = Pool("lease-callbacks", CALLBACK_THREADS_MAX, CALLBACK_STALL, eager=CALLBACK_THREADS)
"""Where user callbacks of sync leases run (never on the timer thread nor a store's thread)."""


def off_timer_thread(run: Callable[[], object]) -> None:
    """Run `run()` now, unless called on the shared timer thread: then on the callback pool.

    What a timer callback that must run user code (a signal's callbacks) does, so that the
    timer thread stays free for every other lease and timeout.
    """
    if TIMER_THREAD.is_current():
        CALLBACKS.submit(run)
    else:
        run()


_STORE_POOLS: weakref.WeakKeyDictionary[object, dict[Hashable, Pool]] = weakref.WeakKeyDictionary()
_STRONG_POOLS: dict[int, dict[Hashable, Pool]] = {}
_POOLS_LOCK = threading.Lock()


def store_pool(store: object, group: Hashable = None) -> Pool:
    """The pool that runs the background calls to `store` (one per store object and renewal group).

    A store whose keys live on separate servers (`SupportsRenewalGroups`) has a pool per
    server: calls that hang on one never hold the threads the others' renewals need.
    """
    with _POOLS_LOCK:
        try:
            pools = _STORE_POOLS.setdefault(store, {})
        except TypeError:  # not weakly referenceable, or unhashable: kept by id for the process
            pools = _STRONG_POOLS.setdefault(id(store), {})
        pool = pools.get(group)
        if pool is None:
            pool = pools[group] = Pool(f"store-{type(store).__name__}", STORE_THREADS, STORE_STALL)
    return pool


def all_pools() -> list[Pool]:
    """Every pool of the process."""
    with _POOLS_LOCK:
        return [*(p for pools in (*_STORE_POOLS.values(), *_STRONG_POOLS.values()) for p in pools.values()), CALLBACKS]


def wait_idle(timeout: float = 5.0) -> bool:
    """Block until every pool is idle (real time); for tests and benchmarks.

    Store pools first, then the callbacks their jobs queued; twice, as a callback may renew.
    """
    deadline = TIMER_THREAD.monotonic() + timeout
    return all(pool.wait_idle(max(0.0, deadline - TIMER_THREAD.monotonic())) for _ in range(2) for pool in all_pools())


fork_generation = 0
"""A number that changes in a child process after `os.fork()`: inherited leases compare it (read as
`_workers.fork_generation`, a module attribute: no call on a lease's path; never imported by name,
which would copy today's number)."""


def _after_fork_in_child() -> None:  # pragma: no cover - runs in a forked child
    global _POOLS_LOCK, fork_generation  # noqa: PLW0603 - held by a parent thread at fork time, maybe
    fork_generation += 1
    _POOLS_LOCK = threading.Lock()
    CALLBACKS._reset()
    _STORE_POOLS.clear()
    _STRONG_POOLS.clear()


on_fork_in_child(_after_fork_in_child)
