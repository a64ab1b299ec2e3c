"""Lock and semaphore stores are told apart (`serves`); store classes have a fixed surface."""

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
    StoreCapabilities,
    serves,
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


def test_serves_tells_the_kinds_apart() -> None:
    """By the kind a store declares, else by how many arguments its `acquire` takes."""
    assert not serves(MemorySemaphoreStore(), LockStore, AsyncLockStore)
    assert serves(MemorySemaphoreStore(), SemaphoreStore)
    assert serves(MemorySemaphoreStore(), AsyncSemaphoreStore)
    assert not serves(MemoryLockStore(), SemaphoreStore, AsyncSemaphoreStore)
    assert serves(MemoryLockStore(), LockStore)
    assert not serves(ThirdPartySemaphore(), LockStore)
    assert serves(ThirdPartySemaphore(), SemaphoreStore)
    client = redis.Redis()
    assert serves(RedisLockStore(client), LockStore)
    assert not serves(RedisLockStore(client), SemaphoreStore)
    assert serves(RedisSemaphoreStore(client), SemaphoreStore)
    assert not serves(RedisSemaphoreStore(client), LockStore)


def test_isinstance_is_structural_and_a_declared_kind_wins_over_the_arguments() -> None:
    """A protocol is its methods; what kind of store it is, the store declares."""
    assert isinstance(MemorySemaphoreStore(), LockStore)  # the same method names

    class Forwarding(ThirdPartySemaphore):
        capabilities = StoreCapabilities(kind="semaphore")

        def acquire(self, key: str, *args: object) -> int | None:  # type: ignore[override]
            return self.inner.acquire(key, *args)  # type: ignore[arg-type]

    assert serves(Forwarding(), SemaphoreStore)
    assert not serves(Forwarding(), LockStore)
    with pytest.raises(ValidationError, match="semaphore store"):
        lock(Forwarding())
    semaphore(Forwarding(), limit=2)


def test_a_third_party_semaphore_store_is_refused_where_a_lock_store_is_wanted() -> None:
    with pytest.raises(ValidationError, match="semaphore store"):
        ResiliencePipelineBuilder().add_lock("k", store=ThirdPartySemaphore()).build()  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match="semaphore store"):
        lock(ThirdPartySemaphore())
    with pytest.raises(ValidationError, match="lock store"):
        semaphore(MemoryLockStore(), limit=2)


def test_a_redis_store_has_a_fixed_surface() -> None:
    """One class whatever the clients: the flavours it serves are declared, the other refuses."""
    store = RedisLockStore(async_client=redis.asyncio.Redis())
    assert type(store) is RedisLockStore
    assert not serves(store, LockStore)
    assert serves(store, AsyncLockStore)
    with pytest.raises(ValidationError, match="sync client"):
        store.acquire("k", "owner", 1.0)
    sync_only = RedisSemaphoreStore(redis.Redis())
    assert type(sync_only) is RedisSemaphoreStore
    assert not serves(sync_only, AsyncSemaphoreStore)
    assert serves(sync_only, SemaphoreStore)
