"""RedisLockStore on a real server and a real Cluster, through its sync and async methods."""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Any

import pytest

from resilience.stores import (
    AsyncLockStore,
    AsyncSupportsLeaseInfo,
    AsyncSupportsReleaseNotification,
    LockStore,
    RedisLockStore,
    SupportsLeaseInfo,
    SupportsReleaseNotification,
)

if TYPE_CHECKING:
    from conftest import Deployment, Flavour

pytestmark = pytest.mark.redis


def test_offers_every_protocol(sync_redis: Any, async_redis: Any) -> None:
    """With both clients the store satisfies the lock protocols and both capabilities, in both flavours."""
    store = RedisLockStore(sync_redis, async_client=async_redis)
    for protocol in (
        LockStore,
        AsyncLockStore,
        SupportsLeaseInfo,
        AsyncSupportsLeaseInfo,
        SupportsReleaseNotification,
        AsyncSupportsReleaseNotification,
    ):
        assert isinstance(store, protocol)


async def test_one_holder_at_a_time(locks: Flavour, key: str) -> None:
    """A held key answers None to another owner; after release the other owner gets it."""
    token = await locks.acquire(key, "alice", 10)
    assert isinstance(token, int)
    assert token >= 1
    assert await locks.acquire(key, "bob", 10) is None
    assert await locks.release(key, "alice") is True
    assert await locks.acquire(key, "bob", 10) > token


async def test_only_the_owner_renews_or_releases(locks: Flavour, key: str) -> None:
    """Renew and release compare the owner inside the script."""
    await locks.acquire(key, "alice", 10)
    assert await locks.renew(key, "bob", 10) is False
    assert await locks.release(key, "bob") is False
    assert await locks.renew(key, "alice", 10) is True
    assert await locks.release(key, "alice") is True
    assert await locks.release(key, "alice") is False
    assert await locks.renew(key, "alice", 10) is False


async def test_same_owner_gets_the_same_token_and_a_fresh_ttl(locks: Flavour, key: str, sync_redis: Any) -> None:
    """A repeated acquire by the holder is idempotent (a lost reply is harmless) and refreshes the ttl."""
    token = await locks.acquire(key, "alice", 0.5)
    assert await locks.acquire(key, "alice", 10) == token
    assert sync_redis.pttl(locks.store.key(key)) > 5000


async def test_remaining_time_is_reported(locks: Flavour, key: str) -> None:
    """`acquire_or_ttl` answers the holder's remaining lease time."""
    token, remaining = await locks.acquire_or_ttl(key, "alice", 2)
    assert token is not None
    assert remaining is None
    token, remaining = await locks.acquire_or_ttl(key, "bob", 2)
    assert token is None
    assert remaining is not None
    assert 1.5 < remaining <= 2.0


async def test_tokens_increase_across_release(locks: Flavour, key: str) -> None:
    """Fifty acquire/release rounds in a row give strictly increasing tokens."""
    tokens = []
    for i in range(50):
        tokens.append(await locks.acquire(key, f"owner-{i}", 10))
        assert await locks.release(key, f"owner-{i}")
    assert tokens == sorted(set(tokens))
    assert all(t < 2**53 for t in tokens)


async def test_release_keeps_a_tombstone_with_an_expiry(locks: Flavour, key: str, sync_redis: Any) -> None:
    """After release the lock is free, and the key only keeps its last token, with an expiry."""
    token = await locks.acquire(key, "alice", 10)
    await locks.release(key, "alice")
    redis_key = locks.store.key(key)
    assert sync_redis.hgetall(redis_key) == {b"token": str(token).encode()}
    assert 0 < sync_redis.pttl(redis_key) <= 60_000


async def test_expiry_frees_the_lock_and_renew_never_reacquires(locks: Flavour, key: str, sync_redis: Any) -> None:
    """A lapsed lease frees the key; the old owner's renew fails and does not take it back."""
    first = await locks.acquire(key, "alice", 0.05)
    await asyncio.sleep(0.08)
    assert await locks.renew(key, "alice", 10) is False
    assert sync_redis.exists(locks.store.key(key)) == 0
    second = await locks.acquire(key, "bob", 10)
    assert second > first
    assert await locks.renew(key, "alice", 10) is False
    assert await locks.release(key, "alice") is False
    assert await locks.acquire(key, "carol", 10) is None


async def test_ttl_is_rounded_up_to_whole_milliseconds(locks: Flavour, key: str, sync_redis: Any) -> None:
    """0.1 ms becomes 1 ms; 1.2004 s becomes 1201 ms."""
    await locks.acquire(key, "alice", 1.2004)
    assert 1000 < sync_redis.pttl(locks.store.key(key)) <= 1201  # the lower bound allows a slow machine
    await locks.renew(key, "alice", 0.0001)
    assert sync_redis.pttl(locks.store.key(key)) <= 1


async def test_flushall_keeps_tokens_increasing(locks: Flavour, key: str, deployment: Deployment) -> None:
    """Tokens come from the server clock, so losing every key does not reset them."""
    before = await locks.acquire(key, "alice", 10)
    deployment.flushall()
    after = await locks.acquire(key, "bob", 10)
    assert after > before


async def test_noscript_is_recovered(locks: Flavour, key: str, deployment: Deployment) -> None:
    """After SCRIPT FLUSH every script call still works (EVALSHA, then EVAL once)."""
    token = await locks.acquire(key, "alice", 10)
    deployment.script_flush()
    assert await locks.acquire(key, "alice", 10) == token
    deployment.script_flush()
    assert await locks.renew(key, "alice", 10) is True
    deployment.script_flush()
    assert await locks.release(key, "alice") is True


HOSTILE_KEYS = [
    "quote'\"`",
    "end) redis.call('FLUSHALL') --",
    "]]..redis.call('DEL', KEYS[1])..[[",
    "{hash}tag",
    "}{",
    "ünïcødé ключ 鍵 🔒",
    "\n\r\t\x00 spaces ",
    "x" * 10_000,
    "",
]


@pytest.mark.parametrize("hostile", HOSTILE_KEYS, ids=range(len(HOSTILE_KEYS)))
async def test_hostile_keys_are_only_arguments(locks: Flavour, key: str, hostile: str, sync_redis: Any) -> None:
    """Quotes, Lua-looking text, unicode, NULs and very long keys are data, never code."""
    name = key + hostile
    sync_redis.set("canary:" + key, "alive")
    try:
        token = await locks.acquire(name, "alice' or '1'=='1", 10)
        assert token is not None
        assert await locks.acquire(name, "bob", 10) is None
        assert sync_redis.hget(locks.store.key(name), "owner") == b"alice' or '1'=='1"
        assert await locks.release(name, "alice' or '1'=='1") is True
        assert sync_redis.get("canary:" + key) == b"alive"
    finally:
        sync_redis.delete("canary:" + key)


async def test_custom_prefix(sync_redis: Any, key: str) -> None:
    """Keys are `<prefix>:<key>`."""
    store = RedisLockStore(sync_redis, prefix="orders")
    assert store.prefix == "orders"
    assert store.acquire(key, "alice", 10) is not None
    assert sync_redis.hget(f"orders:{key}", "owner") == b"alice"
    store.release(key, "alice")


async def test_release_wakes_a_waiter_quickly(locks: Flavour, key: str) -> None:
    """A waiter on a held key wakes within milliseconds of the release, not at its timeout."""
    await locks.acquire(key, "alice", 10)
    # A first short wait subscribes: a release may slip by before a new subscription is active.
    assert await locks.wait_released(key, 0.05) is False
    started = time.perf_counter()
    if locks.is_async:

        async def release_soon() -> bool:
            await asyncio.sleep(0.1)
            return bool(await locks.release(key, "alice"))

        releaser = asyncio.ensure_future(release_soon())
        woke = await locks.wait_released(key, 3)
        assert await releaser
    else:
        # A sync wait blocks the loop: release from another thread.
        def release_soon_sync() -> bool:
            time.sleep(0.1)
            return bool(locks.store.release(key, "alice"))

        releaser_sync = asyncio.get_running_loop().run_in_executor(None, release_soon_sync)
        woke = locks.store.wait_released(key, 3)
        assert await releaser_sync
    elapsed = time.perf_counter() - started
    assert woke is True
    assert elapsed < 2.5  # woken by the release (0.1 s), not by the wait's 3 s timeout: slack for load
    assert await locks.acquire(key, "bob", 10) is not None


async def test_polling_still_works_without_a_notification(locks: Flavour, key: str) -> None:
    """An expiry publishes nothing: the waiter times out, and its next attempt succeeds."""
    # A second of life: on a loaded machine a Cluster subscription can take longer than a
    # shorter lease, and a wait that starts after the expiry finds the key free at once.
    await locks.acquire(key, "alice", 1.0)
    token, remaining = await locks.acquire_or_ttl(key, "bob", 10)
    assert token is None
    assert remaining is not None
    assert await locks.wait_released(key, remaining + 0.02) is False
    assert await locks.acquire(key, "bob", 10) is not None


async def test_waiters_on_other_keys_are_not_woken(locks: Flavour, key: str) -> None:
    """A release wakes only the waiters of its own key."""
    await locks.acquire(key + ":a", "alice", 10)
    await locks.acquire(key + ":b", "alice", 10)
    if locks.is_async:
        waiter = asyncio.ensure_future(locks.wait_released(key + ":b", 0.4))
        await asyncio.sleep(0.1)
        await locks.release(key + ":a", "alice")
        assert await waiter is False
    else:
        loop = asyncio.get_running_loop()
        waiter = loop.run_in_executor(None, locks.store.wait_released, key + ":b", 0.4)
        await asyncio.sleep(0.1)
        await locks.release(key + ":a", "alice")
        assert await waiter is False
