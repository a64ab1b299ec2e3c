"""The lock strategy and the primitives over the PostgreSQL stores, on the session cluster."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest

from resilience import (
    LockLostError,
    LockNotAcquiredError,
    ResiliencePipelineBuilder,
    get_lock_token,
)
from resilience.primitives import lock, semaphore
from resilience.stores import PostgresLockStore, PostgresSemaphoreStore

pytestmark = pytest.mark.postgres


def test_the_strategy_runs_under_a_fenced_lease(pg_locks: PostgresLockStore, pg_key: str) -> None:
    """The callable sees the lease's token; the key is free again afterwards."""
    pipeline = ResiliencePipelineBuilder().add_lock(pg_key, ttl=5, store=pg_locks).build()
    seen = pipeline.execute(get_lock_token)
    assert isinstance(seen, int)
    later = pg_locks.acquire(pg_key, "someone", 5)
    assert later is not None
    assert later > seen


def test_the_strategy_excludes_threads(pg_locks: PostgresLockStore, pg_key: str) -> None:
    """Eight threads through one locked pipeline never overlap, and every one gets in (wait)."""
    pipeline = ResiliencePipelineBuilder().add_lock(pg_key, ttl=5, wait=20, store=pg_locks).build()
    inside = 0
    overlaps = 0
    tokens: list[int] = []
    guard = threading.Lock()

    def work() -> None:
        nonlocal inside, overlaps
        with guard:
            inside += 1
            overlaps += inside > 1
            token = get_lock_token()
            assert token is not None
            tokens.append(token)
        time.sleep(0.005)
        with guard:
            inside -= 1

    threads = [threading.Thread(target=lambda: [pipeline.execute(work) for _ in range(3)]) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert overlaps == 0
    assert len(tokens) == 24
    assert tokens == sorted(tokens)


async def test_the_async_strategy_waits_for_a_release(pg_locks: PostgresLockStore, pg_key: str) -> None:
    """A waiter is woken by the holder's release (NOTIFY), long before its wait ends."""
    pipeline = ResiliencePipelineBuilder().add_lock(pg_key, ttl=30, wait=20, store=pg_locks).build()
    assert await pg_locks.acquire_async(pg_key, "holder", 30) is not None

    async def release_soon() -> None:
        await asyncio.sleep(0.2)
        assert await pg_locks.release_async(pg_key, "holder")

    async def token() -> int | None:
        return get_lock_token()

    started = time.monotonic()
    releaser = asyncio.ensure_future(release_soon())
    seen = await pipeline.execute_async(token)
    await releaser
    assert seen is not None
    assert time.monotonic() - started < 5


def test_a_held_key_is_refused_fast(pg_locks: PostgresLockStore, pg_key: str) -> None:
    """Default wait=0: a held key raises LockNotAcquiredError with the holder's time left."""
    assert pg_locks.acquire(pg_key, "holder", 30) is not None
    pipeline = ResiliencePipelineBuilder().add_lock(pg_key, ttl=5, store=pg_locks).build()
    with pytest.raises(LockNotAcquiredError) as caught:
        pipeline.execute(lambda: "never")
    assert caught.value.key == pg_key


def test_a_lease_taken_away_is_lost(pg_locks: PostgresLockStore, pg_key: str) -> None:
    """When the row is taken by force, the next renewal answers False and the signal aborts."""
    pipeline = ResiliencePipelineBuilder().add_lock(pg_key, ttl=0.6, store=pg_locks).build()

    def body() -> str:
        with pg_locks._sync_pool("test").connection() as conn:
            conn.execute(f"UPDATE {pg_locks.table} SET owner = 'thief' WHERE key = %s", (pg_key,))
        deadline = time.monotonic() + 10
        context_signal = _current_signal()
        while not context_signal.aborted and time.monotonic() < deadline:
            time.sleep(0.02)
        context_signal.raise_if_aborted()
        return "not reached"

    with pytest.raises(LockLostError):
        pipeline.execute(body)


def _current_signal() -> Any:
    from resilience import get_context

    context = get_context()
    assert context is not None
    return context.signal


def test_the_lock_primitive_over_a_store(pg_locks: PostgresLockStore, pg_key: str) -> None:
    """`lock(store)`: run, acquire/extend/release, and the prefix applied once."""
    locks = lock(pg_locks, prefix="app", ttl=5)
    assert locks.run(pg_key, lambda handle: handle.token) > 0
    handle = locks.acquire(pg_key)
    assert handle is not None
    assert pg_locks.acquire(f"app:{pg_key}", "other", 5) is None
    assert locks.acquire(pg_key) is None
    assert handle.extend()
    assert handle.release()
    assert pg_locks.acquire(f"app:{pg_key}", "other", 5) is not None


async def test_the_async_lock_primitive_waits_with_retries(pg_locks: PostgresLockStore, pg_key: str) -> None:
    """`retries` waits are cut short by the release notification."""
    locks = lock(pg_locks, prefix="app", ttl=5)
    first = await locks.acquire_async(pg_key)
    assert first is not None

    async def release_soon() -> None:
        await asyncio.sleep(0.2)
        assert await first.release_async()

    releaser = asyncio.ensure_future(release_soon())
    started = time.monotonic()
    async with locks.hold(pg_key, retries=1, retry_delay=10) as handle:
        assert handle.token > first.token
    await releaser
    assert time.monotonic() - started < 5


def test_the_semaphore_primitive_admits_limit_holders(pg_semaphores: PostgresSemaphoreStore, pg_key: str) -> None:
    """`semaphore(store, limit=2)`: two holders, the third refused; a release lets it in."""
    slots = semaphore(pg_semaphores, limit=2, ttl=5)
    first, second = slots.acquire(pg_key), slots.acquire(pg_key)
    assert first is not None
    assert second is not None
    assert slots.acquire(pg_key) is None
    assert first.release()
    third = slots.acquire(pg_key)
    assert third is not None
    assert third.token > second.token


async def test_the_async_semaphore_primitive(pg_semaphores: PostgresSemaphoreStore, pg_key: str) -> None:
    """The async flavour over the store's async pool."""
    slots = semaphore(pg_semaphores, limit=1, ttl=5)
    result = await slots.run_async(pg_key, _token_of)
    assert result > 0


async def _token_of(handle: Any) -> int:
    token: int = handle.token
    return token


def test_the_concurrency_limiter_over_the_semaphore_store(pg_semaphores: PostgresSemaphoreStore, pg_key: str) -> None:
    """Eight threads through `add_concurrency_limiter(2, store=...)`: never more than two at once, each fenced."""
    pipeline = (
        ResiliencePipelineBuilder().add_concurrency_limiter(2, key=pg_key, store=pg_semaphores, ttl=5, wait=30).build()
    )
    inside = 0
    most = 0
    tokens: list[int] = []
    guard = threading.Lock()

    def work() -> None:
        nonlocal inside, most
        with guard:
            inside += 1
            most = max(most, inside)
            token = get_lock_token()
            assert token is not None
            tokens.append(token)
        time.sleep(0.01)
        with guard:
            inside -= 1

    threads = [threading.Thread(target=lambda: [pipeline.execute(work) for _ in range(3)]) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert 1 <= most <= 2
    assert len(tokens) == 24
    assert len(set(tokens)) == 24


async def test_the_async_concurrency_limiter_over_the_semaphore_store(
    pg_semaphores: PostgresSemaphoreStore, pg_key: str
) -> None:
    pipeline = (
        ResiliencePipelineBuilder().add_concurrency_limiter(1, key=pg_key, store=pg_semaphores, ttl=5, wait=30).build()
    )

    async def token() -> int | None:
        await asyncio.sleep(0.01)
        return get_lock_token()

    seen = await asyncio.gather(*(pipeline.execute_async(token) for _ in range(4)))
    assert None not in seen
    assert len(set(seen)) == 4
