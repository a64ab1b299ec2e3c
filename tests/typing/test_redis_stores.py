"""Type-checked, never run: the Redis stores as a user writes them (mypy --strict and pyright)."""

from __future__ import annotations

from typing import assert_type

import redis
import redis.asyncio

from resilience.stores import (
    AsyncLockStore,
    AsyncSemaphoreStore,
    AsyncSupportsLeaseInfo,
    AsyncSupportsReleaseNotification,
    LockStore,
    RedisLockStore,
    RedisSemaphoreStore,
    SemaphoreStore,
    SupportsLeaseInfo,
    SupportsReleaseNotification,
)


def stores(client: redis.Redis, aclient: redis.asyncio.Redis) -> None:
    locks = RedisLockStore(client, async_client=aclient, prefix="orders")
    lazy = RedisLockStore(redis.Redis, async_client=redis.asyncio.Redis)
    slots = RedisSemaphoreStore(client)
    assert_type(locks, RedisLockStore)
    assert_type(lazy.prefix, str)
    as_lock: LockStore = locks
    as_async_lock: AsyncLockStore = locks
    as_lease_info: SupportsLeaseInfo = locks
    as_async_lease_info: AsyncSupportsLeaseInfo = locks
    as_notifier: SupportsReleaseNotification = locks
    as_async_notifier: AsyncSupportsReleaseNotification = locks
    as_semaphore: SemaphoreStore = slots
    as_async_semaphore: AsyncSemaphoreStore = slots
    assert_type(as_lock.acquire("k", "owner", 30), int | None)
    assert_type(locks.acquire_or_ttl("k", "owner", 30), tuple[int | None, float | None])
    assert_type(slots.acquire("k", "owner", 30, 5), int | None)
    assert_type(as_notifier.wait_released("k", 1.0), bool)
    del as_async_lock, as_lease_info, as_async_lease_info, as_async_notifier, as_semaphore, as_async_semaphore
    locks.close()


async def async_stores(aclient: redis.asyncio.Redis) -> None:
    async with RedisLockStore(async_client=aclient) as locks:
        assert_type(await locks.acquire_async("k", "owner", 30), int | None)
        assert_type(await locks.release_async("k", "owner"), bool)
    slots = RedisSemaphoreStore(async_client=aclient)
    assert_type(await slots.acquire_or_ttl_async("k", "owner", 30, 2), tuple[int | None, float | None])
    await slots.aclose()
