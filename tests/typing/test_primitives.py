"""Type-checked, never run: the primitives as a user writes them (mypy --strict and pyright)."""

from __future__ import annotations

import datetime as dt
from typing import assert_type

import redis
import redis.asyncio

from resilience import Signal
from resilience.primitives import LockHandle, LockHold, Locks, Semaphores, lock, semaphore
from resilience.stores import MemoryLockStore, MemorySemaphoreStore


def charge(handle: LockHandle) -> str:
    return f"charged under token {handle.token}"


async def charge_async(handle: LockHandle) -> int:
    return handle.token


def sync_side(client: redis.Redis) -> None:
    locks = lock(client, prefix="orders", ttl=10)
    assert_type(locks, Locks)
    assert_type(locks.run("42", charge), str)
    assert_type(locks.run("42", charge, ttl=dt.timedelta(seconds=5), retries=3, retry_delay=0.05), str)
    assert_type(locks.run("42", lambda h: h.key, heartbeat=False, on_renew_error=print), str)
    handle = locks.acquire("42", ttl=30)
    assert_type(handle, LockHandle | None)
    if handle is not None:
        assert_type(handle.extend(), bool)
        assert_type(handle.extend(60), bool)
        assert_type(handle.release(), bool)
        assert_type(handle.expires_in(), float)
        assert_type(handle.signal, Signal)
        assert_type(handle.key, str)
    hold = locks.hold("42", heartbeat=2.5)
    assert_type(hold, LockHold)
    with hold as held:
        assert_type(held, LockHandle)
    locks.close()


async def async_side(aclient: redis.asyncio.Redis) -> None:
    locks = lock(aclient)
    assert_type(await locks.run_async("42", charge_async, retries=100), int)
    handle = await locks.acquire_async("42")
    if handle is not None:
        assert_type(await handle.extend_async(), bool)
        assert_type(await handle.release_async(), bool)
    async with locks.hold("42") as held:
        assert_type(held.token, int)
    await locks.aclose()


def stores_and_semaphores() -> None:
    locks = lock(MemoryLockStore(), prefix="jobs")
    assert_type(locks.ttl, float)
    sems = semaphore(MemorySemaphoreStore(), limit=4, ttl=5)
    assert_type(sems, Semaphores)
    assert_type(sems.run("pool", charge), str)
    assert_type(sems.run("pool", charge, permits=2, ttl=5, wait=1.0, heartbeat=False), str)
    with sems.hold("pool", permits=3, on_renew_error=print) as slots:
        assert_type(slots, LockHandle)
    assert_type(sems.acquire("pool", permits=2, wait=0.5), LockHandle | None)
    assert_type(sems.limit, int)


def shared_holds(store: MemoryLockStore) -> None:
    from resilience.stores import AsyncSupportsSharedHolds, SupportsSharedHolds

    locks = lock(store)
    assert_type(locks.run("doc", charge, shared=True, wait=5), str)
    assert_type(locks.acquire("doc", shared=True), LockHandle | None)
    with locks.hold("doc", shared=False) as held:
        assert_type(held.token, int)
    readers: SupportsSharedHolds = store  # the memory store offers the capability in both flavours
    async_readers: AsyncSupportsSharedHolds = store
    assert_type(readers.acquire_shared("doc", "owner", 30.0), int | None)
    assert async_readers is store


async def shared_holds_async(store: MemoryLockStore) -> None:
    locks = lock(store)
    assert_type(await locks.run_async("doc", charge_async, shared=True), int)
    assert_type(await locks.acquire_async("doc", shared=True), LockHandle | None)
    assert_type(await store.acquire_shared_async("doc", "owner", 30.0), int | None)
