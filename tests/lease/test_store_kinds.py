"""Lock and semaphore stores are told apart; store classes have a fixed surface (issue #11)."""

from __future__ import annotations

import pytest
import redis
import redis.asyncio

from resilience import ResiliencePipelineBuilder, ValidationError
from resilience.primitives import lock, semaphore
from resilience.stores import (
    AsyncLockStore,
    AsyncSemaphoreStore,
    LockStore,
    MemoryLockStore,
    MemorySemaphoreStore,
    RedisLockStore,
    RedisSemaphoreStore,
    SemaphoreStore,
)


class ThirdPartySemaphore:
    """A semaphore store of someone else's (only the protocol's methods)."""

    def __init__(self) -> None:
        self.inner = MemorySemaphoreStore()

    def acquire(self, key: str, owner: str, ttl: float, limit: int) -> int | None:
        return self.inner.acquire(key, owner, ttl, limit)

    def renew(self, key: str, owner: str, ttl: float) -> bool:
        return self.inner.renew(key, owner, ttl)

    def release(self, key: str, owner: str) -> bool:
        return self.inner.release(key, owner)


def test_the_protocols_tell_the_kinds_apart() -> None:
    assert not isinstance(MemorySemaphoreStore(), LockStore | AsyncLockStore)
    assert isinstance(MemorySemaphoreStore(), SemaphoreStore)
    assert isinstance(MemorySemaphoreStore(), AsyncSemaphoreStore)
    assert not isinstance(MemoryLockStore(), SemaphoreStore | AsyncSemaphoreStore)
    assert isinstance(MemoryLockStore(), LockStore)
    assert not isinstance(ThirdPartySemaphore(), LockStore)
    assert isinstance(ThirdPartySemaphore(), SemaphoreStore)
    client = redis.Redis()
    assert isinstance(RedisLockStore(client), LockStore)
    assert not isinstance(RedisLockStore(client), SemaphoreStore)
    assert isinstance(RedisSemaphoreStore(client), SemaphoreStore)
    assert not isinstance(RedisSemaphoreStore(client), LockStore)


def test_a_third_party_semaphore_store_is_refused_where_a_lock_store_is_wanted() -> None:
    with pytest.raises(ValidationError, match="semaphore store"):
        ResiliencePipelineBuilder().add_lock("k", store=ThirdPartySemaphore()).build()  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match="semaphore store"):
        lock(ThirdPartySemaphore())
    with pytest.raises(ValidationError, match="lock store"):
        semaphore(MemoryLockStore(), limit=2)


def test_a_redis_store_has_a_fixed_surface() -> None:
    store = RedisLockStore(async_client=redis.asyncio.Redis())
    assert type(store) is RedisLockStore
    assert not isinstance(store, LockStore)
    assert isinstance(store, AsyncLockStore)
    with pytest.raises(ValidationError, match="sync client"):
        store.acquire("k", "owner", 1.0)
    sync_only = RedisSemaphoreStore(redis.Redis())
    assert type(sync_only) is RedisSemaphoreStore
    assert not isinstance(sync_only, AsyncSemaphoreStore)
