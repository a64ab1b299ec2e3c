"""The small thread pool shared by every sync hedged execution of the process.

Sync hedging runs the original attempt on the caller's thread and each extra attempt here.
At most `POOL_SIZE` threads exist, made on demand and ended after `IDLE_SECONDS` without work;
when all are busy, attempts queue (and one whose execution finished, or whose caller is free
to run it itself, before a thread took it is withdrawn). A thread never runs more than one
attempt at a time, so the threads in use are exactly the hedged attempts in flight. After
`os.fork()` the child starts with an empty pool.
"""

from __future__ import annotations

from resilience._runtime._pool import Pool
from resilience._runtime._threads import on_fork_in_child

__all__ = ["IDLE_SECONDS", "POOL", "POOL_SIZE", "HedgingPool"]

POOL_SIZE = 16
"""Threads at most, for every sync hedged attempt of the process."""
IDLE_SECONDS = 30.0
"""A thread with nothing to do for this long ends."""


class HedgingPool(Pool):
    """The runtime's pool, sized for hedged attempts: every thread up to `size` starts at once."""

    def __init__(self, size: int = POOL_SIZE, idle_seconds: float = IDLE_SECONDS) -> None:
        super().__init__("hedging", size, idle=idle_seconds)


POOL = HedgingPool()
"""The process's one hedging pool."""

on_fork_in_child(POOL._reset)  # the parent's threads do not exist in a child
