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

__all__ = ["IDLE_SECONDS", "POOL", "POOL_SIZE"]

POOL_SIZE = 16
"""Threads at most, for every sync hedged attempt of the process."""
IDLE_SECONDS = 30.0
"""A thread with nothing to do for this long ends."""

POOL = Pool("hedging", POOL_SIZE, idle=IDLE_SECONDS)
"""The process's one hedging pool: the runtime's, every thread up to `POOL_SIZE` started at once when attempts wait."""

on_fork_in_child(POOL._reset)  # the parent's threads do not exist in a child
