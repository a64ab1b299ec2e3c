"""The lease engine shared by the lock strategy and the primitives (private).

- `_core`: the decisions, pure code taking `now` (acquisition backoff, deadline, renewal).
- `_ops`: store adapters (lock and semaphore stores look alike to the engine).
- `_workers`: the sync runtime's threads: a small pool per store for store calls, one bounded
  pool for user callbacks (each lease's in order), and the fork generation.
- `_lease`: `LeaseParams`, the per-clock `Scheduler`, the sync `Lease` and `acquire_lease`.
- `_async`: `AsyncLease` and `acquire_lease_async`.
- `_events`: the lock events (`LockEvents`) and the held-lock set (`HELD_LOCKS`).

How a caller uses it (the strategy does this; the primitives will too)::

    ops = LockOps(store)  # or SharedLockOps(store) (shared holds), SemaphoreOps(store, limit)
    # A primitive's: LockOps(store, "lock:"): the store holds "lock:<key>" (`lease.store_key`).
    params = LeaseParams(
        ttl=ttl, renew_interval=ttl / 3, on_lost=lambda lease: ..., on_renew_error=lambda lease, exc: ...
    )
    lease, held_for = acquire_lease(
        ops, key, params=params, schedule=BackoffSchedule(now, wait, rng), time_provider=tp, signal=parent_signal
    )
    if lease is None:
        ...  # refused; held_for is the holder's time left, if known
    try:
        ...  # the body, under lease.signal and lease.token
    finally:
        error = lease.finish()  # LockLostError | None

The primitives' handles: `lease.key`, `.token`, `.signal`, `.expires_in()`, `.extend(ttl=None)`
(False aborts the signal), `.release()` (by the holder; `finish` then sends nothing). Async:
`acquire_lease_async`, `extend_async`, `release_async`, `finish_async`.
"""

from resilience._lease._async import RELEASE_TIMEOUT, AsyncLease, acquire_lease_async
from resilience._lease._core import BackoffSchedule, SpinSchedule
from resilience._lease._events import HELD_LOCKS, LockEventArguments, LockEvents
from resilience._lease._lease import Lease, LeaseBase, LeaseParams, acquire_lease, call_sync_hook, new_owner
from resilience._lease._ops import LockOps, SemaphoreOps, SharedLockOps, StoreOps
from resilience._lease._workers import wait_idle

__all__ = [
    "HELD_LOCKS",
    "RELEASE_TIMEOUT",
    "AsyncLease",
    "BackoffSchedule",
    "Lease",
    "LeaseBase",
    "LeaseParams",
    "LockEventArguments",
    "LockEvents",
    "LockOps",
    "SemaphoreOps",
    "SharedLockOps",
    "SpinSchedule",
    "StoreOps",
    "acquire_lease",
    "acquire_lease_async",
    "call_sync_hook",
    "new_owner",
    "wait_idle",
]
