"""A store declares what the lease engine may use through one public `StoreCapabilities`."""

from __future__ import annotations

from typing import Any

from resilience._lease import LockOps, SemaphoreOps
from resilience.primitives import lock
from resilience.stores import (
    DeclaresCapabilities,
    MemoryLockStore,
    MemorySemaphoreStore,
    PostgresLockStore,
    PostgresSemaphoreStore,
    RedisLockStore,
    RedisSemaphoreStore,
    StoreCapabilities,
)
from resilience.testing import FakeTimeProvider


class ThirdPartyStore:
    """A store of someone else's: the lock protocols by delegation, plus what it declares."""

    def __init__(self) -> None:
        self.inner = MemoryLockStore(FakeTimeProvider())

    def acquire(self, key: str, owner: str, ttl: float) -> int | None:
        return self.inner.acquire(key, owner, ttl)

    def renew(self, key: str, owner: str, ttl: float) -> bool:
        return self.inner.renew(key, owner, ttl)

    def release(self, key: str, owner: str) -> bool:
        return self.inner.release(key, owner)

    def acquire_or_queue(self, key: str, owner: str, ttl: float) -> Any:
        return self.inner.acquire_or_queue(key, owner, ttl)


def test_a_third_party_store_opts_into_fair_queueing_and_a_shared_pool() -> None:
    """Declared capabilities are what the engine uses; a store that declares none gets none."""
    plain = ThirdPartyStore()
    assert not isinstance(plain, DeclaresCapabilities)
    ops = LockOps(plain)
    assert (ops.fair, ops.inline, ops.pool_owner) == (False, False, plain)
    pool = object()

    class FairStore(ThirdPartyStore):
        capabilities = StoreCapabilities(fair_queue=True, pool_key=pool)

    fair = FairStore()
    assert isinstance(fair, DeclaresCapabilities)
    ops = LockOps(fair)
    assert ops.fair
    assert ops.pool_owner is pool
    assert ops.queue("k", "a", 5.0)[0] is not None
    assert ops.queue("k", "b", 5.0)[0] is None  # b waits in the store's queue


def test_the_memory_stores_declare_theirs_and_a_subclass_loses_what_it_overrides() -> None:
    """In-process answers and timer-thread renewals hold for the memory stores' own code only."""
    assert MemoryLockStore.capabilities == StoreCapabilities(
        kind="lock", fair_queue=True, answers_inline=True, renews_on_timer=True
    )
    ops = SemaphoreOps(MemorySemaphoreStore(), 2)
    assert (ops.fair, ops.inline, ops.renews_on_timer, ops.lease_info) == (True, True, True, True)

    class Slow(MemoryLockStore):
        async def acquire_async(self, key: str, owner: str, ttl: float) -> int | None:
            return self.acquire(key, owner, ttl)

        def renew_many(self, items: Any) -> Any:
            return super().renew_many(items)

    assert Slow.capabilities == StoreCapabilities(kind="lock", fair_queue=True)
    assert not LockOps(Slow()).inline
    assert MemoryLockStore.capabilities.answers_inline  # the parent's declaration is untouched


def test_the_database_stores_queue_and_only_the_semaphores_pass_the_limit() -> None:
    """Redis and PostgreSQL stores queue their waiters; only semaphore stores' lease info takes the limit."""
    semaphore = StoreCapabilities(kind="semaphore", fair_queue=True, lease_info_takes_limit=True)
    assert PostgresLockStore.capabilities == StoreCapabilities(kind="lock", fair_queue=True)
    assert PostgresSemaphoreStore.capabilities == semaphore
    assert RedisLockStore.capabilities == StoreCapabilities(kind="lock", fair_queue=True)
    assert RedisSemaphoreStore.capabilities == semaphore


def test_a_primitive_drives_the_callers_store_under_its_prefix() -> None:
    """A primitive's leases use the caller's store (its capabilities, its pool), the prefix held by the adapter."""
    clock = FakeTimeProvider()
    store = MemoryLockStore(clock)
    ops = lock(store, prefix="jobs", time_provider=clock)._ops
    assert ops.store is store
    assert ops.prefix == "jobs:"
    assert (ops.fair, ops.inline, ops.renews_on_timer) == (True, True, True)
    assert ops.pool_owner is store
