"""`info`, `force_release` and `available` of the primitives, on every store: memory, Redis
(standalone and Cluster) and PostgreSQL, sync and asyncio (docs/primitives.md, "Inspecting and
breaking locks").
"""

from __future__ import annotations

import threading
import uuid
from dataclasses import FrozenInstanceError
from typing import TYPE_CHECKING, Any

import pytest
import redis
import redis.asyncio
import redis.asyncio.cluster
import redis.cluster

from resilience import LockLeaseLostError, SemaphoreLeaseLostError, ValidationError
from resilience.primitives import HolderInfo, LockInfo, lock
from resilience.stores import (
    MemoryLockStore,
    RedisLockStore,
    SupportsInspection,
)

if TYPE_CHECKING:
    from resilience.primitives import LockHandle
    from tests.primitives.conftest import Backend


def _key() -> str:
    return f"job:{uuid.uuid4().hex[:12]}"


def test_a_free_key_has_no_info(backend: Backend) -> None:
    assert backend.locks().info(_key()) is None
    assert backend.semaphores(2).info(_key()) is None
    assert backend.semaphores(2).available(_key()) == 2


def test_info_of_a_held_lock(backend: Backend) -> None:
    """Mode, the holder's owner, token and time left, permits 1; the key as the caller named it."""
    locks = backend.locks(ttl=20)
    key = _key()
    handle = locks.acquire(key)
    assert handle is not None
    found = locks.info(key)
    assert isinstance(found, LockInfo)
    assert (found.key, found.mode, len(found.holders)) == (key, "exclusive", 1)
    holder = found.holders[0]
    assert isinstance(holder, HolderInfo)
    assert holder.token == handle.token
    assert holder.owner
    assert holder.permits == 1
    assert holder.expires_in is not None
    assert 0 < holder.expires_in <= 20
    assert found.waiters == (0 if backend.records_waiters else None)
    with pytest.raises(FrozenInstanceError):
        found.key = "other"  # type: ignore[misc]
    if backend.records_waiters:
        backend.queue_lock(key, "waiter-1")
        backend.queue_lock(key, "waiter-2")
        again = locks.info(key)
        assert again is not None
        assert again.waiters == 2
        assert again.holders == (
            HolderInfo(holder.owner, holder.token, again.holders[0].expires_in, 1),
        )  # the same holder
    assert handle.release()
    after = locks.info(key)
    if backend.name in ("redis", "cluster"):
        # Redis hands a released lock straight to the live head of the queue.
        assert after is not None
        assert ([h.owner for h in after.holders], after.waiters) == (["waiter-1"], 1)
    else:
        assert after is None


def test_force_release_frees_the_key_and_the_holder_learns_at_its_next_renewal(backend: Backend) -> None:
    locks = backend.locks(ttl=20)
    key = _key()
    handle = locks.acquire(key)
    assert handle is not None
    assert locks.force_release(key) is True
    assert locks.info(key) is None
    assert handle.extend() is False  # its renewal answers False: the loss is known
    assert isinstance(handle.signal.reason, LockLeaseLostError)
    assert locks.force_release(key) is False  # free already
    successor = locks.acquire(key)
    assert successor is not None
    assert successor.token > handle.token  # fencing keeps the broken holder out
    assert successor.release()


def test_a_running_holder_broken_by_force_release_raises_lease_lost(backend: Backend) -> None:
    """`run`: the next renewal (every ttl/4) aborts the signal; `run` raises even when the body returns."""
    locks = backend.locks(ttl=1.0)
    key = _key()
    seen: list[bool] = []

    def body(handle: LockHandle) -> str:
        assert locks.force_release(key)
        seen.append(handle.signal.wait(10))
        return "done"

    with pytest.raises(LockLeaseLostError):
        locks.run(key, body)
    assert seen == [True]


def test_force_release_wakes_a_queued_waiter(backend: Backend) -> None:
    """A waiter queued behind the broken holder takes the key at once, not after the ttl."""
    locks = backend.locks(ttl=30)
    key = _key()
    holder = locks.acquire(key)
    assert holder is not None
    taken = threading.Event()
    tokens: list[int] = []

    def waiter() -> None:
        handle = locks.acquire(key, wait=25)
        assert handle is not None
        tokens.append(handle.token)
        taken.set()
        handle.release()

    thread = threading.Thread(target=waiter)
    thread.start()
    try:
        if backend.records_waiters:  # the waiter is in the queue before the key is broken
            for _ in range(1000):
                info = locks.info(key)
                if info is not None and info.waiters == 1:
                    break
                threading.Event().wait(0.01)
        assert locks.force_release(key)
        assert taken.wait(20)  # well before the holder's 30 s lease would have ended
    finally:
        thread.join(30)
    assert tokens[0] > holder.token


def test_semaphore_info_available_and_force_release(backend: Backend) -> None:
    semaphores = backend.semaphores(3, ttl=20)
    key = _key()
    first, second = semaphores.acquire(key), semaphores.acquire(key)
    assert first is not None
    assert second is not None
    found = semaphores.info(key)
    assert found is not None
    assert (found.key, found.mode) == (key, "semaphore")
    assert [holder.token for holder in found.holders] == sorted([first.token, second.token])
    assert all(holder.permits == 1 for holder in found.holders)
    assert all(holder.expires_in is not None and 0 < holder.expires_in <= 20 for holder in found.holders)
    assert found.waiters == (0 if backend.semaphore_records_waiters else None)
    assert semaphores.available(key) == 1
    third = semaphores.acquire(key)
    assert third is not None
    assert semaphores.available(key) == 0
    if backend.semaphore_records_waiters:
        backend.queue_semaphore(key, "waiter", 3)
        info = semaphores.info(key)
        assert info is not None
        assert info.waiters == 1
    assert semaphores.force_release(key) is True
    assert semaphores.info(key) is None
    assert semaphores.available(key) == 3
    assert first.extend() is False
    assert isinstance(first.signal.reason, SemaphoreLeaseLostError)
    assert semaphores.force_release(key) is False


async def test_the_async_twins(backend: Backend) -> None:
    locks = backend.locks(ttl=20)
    semaphores = backend.semaphores(2, ttl=20)
    key = _key()
    assert await locks.info_async(key) is None
    handle = await locks.acquire_async(key)
    assert handle is not None
    found = await locks.info_async(key)
    assert found is not None
    assert (found.key, found.mode, found.holders[0].token) == (key, "exclusive", handle.token)
    assert await locks.force_release_async(key) is True
    assert await locks.force_release_async(key) is False
    assert await handle.extend_async() is False

    slot = await semaphores.acquire_async(key)
    assert slot is not None
    assert await semaphores.available_async(key) == 1
    info = await semaphores.info_async(key)
    assert info is not None
    assert [holder.token for holder in info.holders] == [slot.token]
    assert await semaphores.force_release_async(key) is True
    assert await semaphores.available_async(key) == 2
    assert await slot.extend_async() is False


def test_bad_keys_are_refused_before_any_store_call() -> None:
    locks = lock(MemoryLockStore())
    for bad in ("", None, 42):
        with pytest.raises(ValidationError, match="key"):
            locks.info(bad)  # type: ignore[arg-type]
        with pytest.raises(ValidationError, match="key"):
            locks.force_release(bad)  # type: ignore[arg-type]


class _PlainLockStore:
    """A third-party lock store with no inspection capability."""

    def __init__(self) -> None:
        self.inner = MemoryLockStore()

    def acquire(self, key: str, owner: str, ttl: float) -> int | None:
        return self.inner.acquire(key, owner, ttl)

    def renew(self, key: str, owner: str, ttl: float) -> bool:
        return self.inner.renew(key, owner, ttl)

    def release(self, key: str, owner: str) -> bool:
        return self.inner.release(key, owner)


def test_a_store_without_the_capability_gets_a_validation_error_naming_it() -> None:
    store = _PlainLockStore()
    assert not isinstance(store, SupportsInspection)
    locks = lock(store)
    with pytest.raises(ValidationError, match="SupportsInspection"):
        locks.info("k")
    with pytest.raises(ValidationError, match="SupportsInspection"):
        locks.force_release("k")
    assert isinstance(MemoryLockStore(), SupportsInspection)


async def test_a_sync_only_redis_store_refuses_the_async_twins(redis_server: Any) -> None:
    with redis.Redis(host=redis_server.host, port=redis_server.port) as client:
        locks = lock(client)
        with pytest.raises(ValidationError, match="asyncio client"):
            await locks.info_async("k")
        with pytest.raises(ValidationError, match="asyncio client"):
            await locks.force_release_async("k")
        assert locks.info("k") is None


async def test_an_async_only_redis_store_refuses_the_sync_methods(redis_server: Any) -> None:
    client = redis.asyncio.Redis(host=redis_server.host, port=redis_server.port)
    locks = lock(client)
    with pytest.raises(ValidationError, match="sync client"):
        locks.info("k")
    assert await locks.info_async("k") is None
    await locks.aclose()
    await client.aclose()


def test_a_redis_lock_key_without_a_queue_reports_unknown_waiters(redis_server: Any) -> None:
    """A key with a `}` but no hash tag cannot have a queue in its Cluster slot: waiters are None."""
    with redis.Redis(host=redis_server.host, port=redis_server.port) as client:
        store = RedisLockStore(client, prefix=f"t{uuid.uuid4().hex[:8]}")
        assert store.acquire("odd}key", "o", 30) is not None
        found = store.info("odd}key")
        assert found is not None
        assert (found.key, found.waiters, found.holders[0].owner) == ("odd}key", None, "o")
        client.persist(store.key("odd}key"))
        persisted = store.info("odd}key")
        assert persisted is not None
        assert persisted.holders[0].expires_in is None
        assert store.force_release("odd}key")
        store.close()
