"""Locks, semaphores and leader election for code that holds a Redis client but no pipeline.

    from resilience.primitives import lock
    from resilience.stores import redis_client

    locks = lock(redis_client("redis://localhost:6379/0"), ttl=30)
    receipt = locks.run("order:42", lambda handle: charge(handle.token))

`lock` and `semaphore` live in `_locks.py` (with the lease policy), `election` in `_election.py`;
`LockInfo` and `HolderInfo` (what `info` returns) come from `resilience.stores`.
"""

from resilience.primitives._election import Election, LeaderInfo, election
from resilience.primitives._locks import LockHandle, LockHold, Locks, Semaphores, lock, semaphore
from resilience.stores import HolderInfo, LockInfo

__all__ = [
    "Election",
    "HolderInfo",
    "LeaderInfo",
    "LockHandle",
    "LockHold",
    "LockInfo",
    "Locks",
    "Semaphores",
    "election",
    "lock",
    "semaphore",
]
