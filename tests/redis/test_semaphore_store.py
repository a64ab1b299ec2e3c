"""RedisSemaphoreStore on a real server and a real Cluster, through its sync and async methods."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

import pytest

from resilience.stores import AsyncSemaphoreStore, RedisSemaphoreStore, SemaphoreStore

if TYPE_CHECKING:
    from conftest import Deployment, Flavour

pytestmark = pytest.mark.redis


def test_offers_the_semaphore_protocols(sync_redis: Any, async_redis: Any) -> None:
    """With both clients the store satisfies both semaphore protocols."""
    store = RedisSemaphoreStore(sync_redis, async_client=async_redis)
    assert isinstance(store, SemaphoreStore)
    assert isinstance(store, AsyncSemaphoreStore)


async def test_limit_holders_at_once(semaphores: Flavour, key: str) -> None:
    """With limit 3, three owners get distinct, increasing tokens and the fourth gets None."""
    tokens = [await semaphores.acquire(key, f"owner-{i}", 10, 3) for i in range(3)]
    assert all(isinstance(t, int) and t >= 1 for t in tokens)
    assert tokens == sorted(set(tokens))
    assert await semaphores.acquire(key, "owner-3", 10, 3) is None
    assert await semaphores.release(key, "owner-1") is True
    fourth = await semaphores.acquire(key, "owner-3", 10, 3)
    assert fourth > tokens[-1]
    assert await semaphores.acquire(key, "owner-4", 10, 3) is None


async def test_limit_is_enforced_at_each_call(semaphores: Flavour, key: str) -> None:
    """A caller with a larger limit gets in; one with a smaller limit is refused."""
    await semaphores.acquire(key, "a", 10, 2)
    await semaphores.acquire(key, "b", 10, 2)
    assert await semaphores.acquire(key, "c", 10, 3) is not None
    assert await semaphores.acquire(key, "d", 10, 1) is None


async def test_a_full_semaphore_says_when_the_first_slot_frees(semaphores: Flavour, key: str) -> None:
    """`acquire_or_ttl` (with the limit) answers the time until the earliest slot expires."""
    assert semaphores.store.capabilities.lease_info_takes_limit is True
    assert (await semaphores.acquire_or_ttl(key, "a", 1, 2))[0] is not None
    await semaphores.acquire(key, "b", 5, 2)
    token, remaining = await semaphores.acquire_or_ttl(key, "c", 5, 2)
    assert token is None
    assert remaining is not None
    assert 0.5 < remaining <= 1.0


async def test_same_owner_keeps_its_slot_and_token(semaphores: Flavour, key: str) -> None:
    """A repeated acquire by a holder returns its token and takes no second slot."""
    token = await semaphores.acquire(key, "a", 10, 2)
    assert await semaphores.acquire(key, "a", 10, 2) == token
    assert await semaphores.acquire(key, "b", 10, 2) is not None
    assert await semaphores.acquire(key, "a", 10, 2) == token


async def test_owner_checks(semaphores: Flavour, key: str) -> None:
    """Only a holder renews or releases its slot."""
    await semaphores.acquire(key, "a", 10, 2)
    assert await semaphores.renew(key, "b", 10) is False
    assert await semaphores.release(key, "b") is False
    assert await semaphores.renew(key, "a", 10) is True
    assert await semaphores.release(key, "a") is True
    assert await semaphores.release(key, "a") is False
    assert await semaphores.renew(key, "a", 10) is False


async def test_expired_holders_are_pruned(semaphores: Flavour, key: str, sync_redis: Any) -> None:
    """A lapsed slot frees itself: the next acquire prunes it, and its renew fails."""
    first = await semaphores.acquire(key, "a", 0.2, 1)
    assert await semaphores.acquire(key, "b", 10, 1) is None
    await asyncio.sleep(0.25)
    second = await semaphores.acquire(key, "b", 10, 1)
    assert second > first
    assert await semaphores.renew(key, "a", 10) is False
    holders, tokens = semaphores.store.keys(key)
    assert sync_redis.zrange(holders, 0, -1) == [b"b"]
    assert set(sync_redis.hkeys(tokens)) - {b"l", b"x"} == {b"seq", b"o:b"}  # `l`, `x`: the limit, extra permits


async def test_keys_always_expire(semaphores: Flavour, key: str, sync_redis: Any) -> None:
    """Both keys live as long as the last lease plus a tombstone; the emptied set goes at once."""
    await semaphores.acquire(key, "a", 1, 2)
    await semaphores.acquire(key, "b", 2, 2)
    holders, tokens = semaphores.store.keys(key)
    assert 61_500 < sync_redis.pttl(holders) <= 62_000
    assert 61_500 < sync_redis.pttl(tokens) <= 62_000
    await semaphores.release(key, "a")
    await semaphores.release(key, "b")
    assert sync_redis.exists(holders) == 0
    assert 0 < sync_redis.pttl(tokens) <= 60_000


async def test_tokens_survive_flushall(semaphores: Flavour, key: str, deployment: Deployment) -> None:
    """Tokens are seeded from the server clock, so they keep increasing after data loss."""
    before = await semaphores.acquire(key, "a", 10, 1)
    deployment.flushall()
    assert await semaphores.acquire(key, "b", 10, 1) > before


async def test_release_wakes_a_waiter(semaphores: Flavour, key: str) -> None:
    """A release publishes on the semaphore's channel."""
    await semaphores.acquire(key, "a", 10, 1)
    assert await semaphores.wait_released(key, 0.05) is False
    if semaphores.is_async:

        async def release_soon() -> bool:
            await asyncio.sleep(0.05)
            return bool(await semaphores.release(key, "a"))

        releaser = asyncio.ensure_future(release_soon())
        assert await semaphores.wait_released(key, 3) is True
        assert await releaser
    else:

        def release_soon_sync() -> bool:
            import time

            time.sleep(0.05)
            return bool(semaphores.store.release(key, "a"))

        releaser_sync = asyncio.get_running_loop().run_in_executor(None, release_soon_sync)
        assert semaphores.store.wait_released(key, 3) is True
        assert await releaser_sync


@pytest.mark.parametrize("hostile", ["}{", "{x}", "a}b{c", "'); redis.call('FLUSHALL') --", "ключ"])
async def test_hostile_keys_stay_in_one_slot(semaphores: Flavour, key: str, hostile: str) -> None:
    """Braces in the key never split the two semaphore keys across hash slots."""
    name = hostile + key
    assert await semaphores.acquire(name, "a", 10, 1) is not None
    assert await semaphores.release(name, "a") is True


async def test_noscript_is_recovered(semaphores: Flavour, key: str, deployment: Deployment) -> None:
    """After SCRIPT FLUSH the semaphore scripts are loaded again."""
    deployment.script_flush()
    assert await semaphores.acquire(key, "a", 10, 1) is not None
    deployment.script_flush()
    assert await semaphores.renew(key, "a", 10) is True
    deployment.script_flush()
    assert await semaphores.release(key, "a") is True
