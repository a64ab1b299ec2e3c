"""A store declares what the lease engine may use through one public `StoreCapabilities`."""

from __future__ import annotations

from typing import Any

from resilience._lease import LockOps, SemaphoreOps
from resilience.stores import DeclaresCapabilities, MemoryLockStore, MemorySemaphoreStore, StoreCapabilities
from resilience.testing import FakeTimeProvider


class ThirdPartyStore:
    """A store of someone else's: the lock protocols by delegation, plus what it declares."""

    def __init__(self, capabilities: StoreCapabilities | None = None) -> None:
        self.inner = MemoryLockStore(FakeTimeProvider())
        if capabilities is not None:
            self.capabilities = capabilities

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
    fair = ThirdPartyStore(StoreCapabilities(fair_queue=True, pool_key=pool))
    assert isinstance(fair, DeclaresCapabilities)
    ops = LockOps(fair)
    assert ops.fair
    assert ops.pool_owner is pool
    assert ops.queue("k", "a", 5.0)[0] is not None
    assert ops.queue("k", "b", 5.0)[0] is None  # b waits in the store's queue


def test_the_memory_stores_declare_theirs_and_a_subclass_loses_what_it_overrides() -> None:
    """In-process answers and timer-thread renewals hold for the memory stores' own code only."""
    assert MemoryLockStore.capabilities == StoreCapabilities(fair_queue=True, answers_inline=True, renews_on_timer=True)
    assert SemaphoreOps(MemorySemaphoreStore(), 2).lease_info

    class Slow(MemoryLockStore):
        async def acquire_async(self, key: str, owner: str, ttl: float) -> int | None:
            return self.acquire(key, owner, ttl)

        def renew_many(self, items: Any) -> Any:
            return super().renew_many(items)

    assert Slow.capabilities == StoreCapabilities(fair_queue=True)
    assert not LockOps(Slow()).inline
