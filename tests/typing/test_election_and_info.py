"""Type-checked, never run: inspection and leader election as a user writes them (mypy --strict and pyright)."""

from __future__ import annotations

from typing import assert_type

import redis
import redis.asyncio

from resilience.primitives import Election, HolderInfo, LeaderInfo, LockHandle, LockInfo, election, lock, semaphore
from resilience.stores import MemoryLockStore, MemorySemaphoreStore, SupportsInspection


def lead(handle: LockHandle) -> str:
    return f"leading in term {handle.token}"


async def lead_async(handle: LockHandle) -> int:
    return handle.token


def sync_side(client: redis.Redis) -> None:
    locks = lock(client)
    found = locks.info("order:42")
    assert_type(found, LockInfo | None)
    if found is not None:
        assert_type(found.holders, tuple[HolderInfo, ...])
        assert_type(found.waiters, int | None)
        assert_type(found.holders[0].expires_in, float | None)
        assert_type(found.holders[0].permits, int)
    assert_type(locks.force_release("order:42"), bool)
    assert_type(semaphore(MemorySemaphoreStore(), limit=2).available("gpu"), int)
    candidate = election(client, "scheduler", identity="node-1", ttl=10)
    assert_type(candidate, Election)
    assert_type(candidate.run(lead), str)
    assert_type(candidate.run(lead, wait=30), str)
    assert_type(candidate.leader(), LeaderInfo | None)
    store: SupportsInspection = MemoryLockStore()
    assert_type(store.info("k"), LockInfo | None)


async def async_side(client: redis.asyncio.Redis) -> None:
    candidate = election(client, "scheduler")
    assert_type(await candidate.run_async(lead_async), int)
    assert_type(await candidate.leader_async(), LeaderInfo | None)
    assert_type(await lock(client).info_async("k"), LockInfo | None)
    assert_type(await lock(client).force_release_async("k"), bool)
    assert_type(await semaphore(client, limit=3).available_async("k"), int)
