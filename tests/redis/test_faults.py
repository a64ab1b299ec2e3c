"""Data loss and outages on a server of the test's own: tokens keep increasing, errors pass through."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import TYPE_CHECKING, Any

import pytest
import redis
import redis.asyncio
import redis.backoff
import redis.retry

from resilience.stores import RedisLockStore, RedisSemaphoreStore

if TYPE_CHECKING:
    from collections.abc import Callable

    from redis_support import RedisServer

pytestmark = pytest.mark.redis


def _after_reconnect(call: Callable[[], Any]) -> Any:
    """The first command after a restart may meet the dead connection: redis-py raises once."""
    try:
        return call()
    except redis.exceptions.ConnectionError:
        return call()


def test_tokens_increase_across_a_restart_without_persistence(fresh_redis_server: RedisServer) -> None:
    """An empty restarted server still issues larger tokens (they are seeded from its clock)."""
    client = redis.Redis(port=fresh_redis_server.port)
    locks, semaphores = RedisLockStore(client), RedisSemaphoreStore(client)
    try:
        lock_before = locks.acquire("job", "a", 30)
        slot_before = semaphores.acquire("pool", "a", 30, 2)
        fresh_redis_server.restart()
        assert _after_reconnect(lambda: locks.acquire("job", "b", 30)) > lock_before
        assert semaphores.acquire("pool", "b", 30, 2) > slot_before
        # The old holder's lease went with the data: its renew says so, and never re-acquires.
        assert locks.renew("job", "a", 30) is False
    finally:
        locks.close()
        semaphores.close()
        client.close()


async def test_async_tokens_increase_across_a_restart(fresh_redis_server: RedisServer) -> None:
    client = redis.asyncio.Redis(port=fresh_redis_server.port)
    store = RedisLockStore(async_client=client)
    try:
        before = await store.acquire_async("job", "a", 30)
        fresh_redis_server.restart()
        try:
            after = await store.acquire_async("job", "b", 30)
        except redis.exceptions.ConnectionError:
            after = await store.acquire_async("job", "b", 30)
        assert after > before
    finally:
        await store.aclose()
        await client.aclose()


def test_store_errors_propagate_unchanged(fresh_redis_server: RedisServer) -> None:
    """With the server down, acquire raises redis-py's ConnectionError as is (DESIGN §2.5)."""
    no_retry = redis.retry.Retry(redis.backoff.NoBackoff(), 0)
    client = redis.Redis(port=fresh_redis_server.port, socket_connect_timeout=0.5, retry=no_retry)
    store = RedisLockStore(client)
    try:
        fresh_redis_server.stop()
        with pytest.raises(redis.exceptions.ConnectionError):
            store.acquire("job", "a", 30)
        with pytest.raises(redis.exceptions.ConnectionError):
            store.release("job", "a")
        fresh_redis_server.start()
        assert _after_reconnect(lambda: store.acquire("job", "a", 30)) is not None
    finally:
        store.close()
        client.close()


def test_a_waiter_survives_an_outage(fresh_redis_server: RedisServer) -> None:
    """During an outage a wait just times out; after it, notifications work again."""
    client = redis.Redis(port=fresh_redis_server.port, socket_connect_timeout=0.5)
    store = RedisLockStore(client)
    try:
        store.acquire("job", "a", 30)
        assert store.wait_released("job", 0.05) is False
        fresh_redis_server.stop()
        assert store.wait_released("job", 0.2) is False
        fresh_redis_server.start()
        assert _after_reconnect(lambda: store.acquire("job", "a", 30)) is not None
        deadline = time.monotonic() + 5
        woke = False
        while not woke and time.monotonic() < deadline:
            # Once the listener has resubscribed, a release wakes the waiter.
            releaser = threading.Timer(0.1, lambda: store.release("job", "a"))
            releaser.start()
            woke = store.wait_released("job", 0.5)
            releaser.join()
            store.acquire("job", "a", 30)
        assert woke
    finally:
        store.close()
        client.close()


async def test_waiters_on_many_keys_share_one_connection(fresh_redis_server: RedisServer) -> None:
    """Twenty waiting keys use one subscription connection (per store and loop), not twenty."""
    client = redis.asyncio.Redis(port=fresh_redis_server.port)
    store = RedisLockStore(async_client=client)
    try:
        for i in range(20):
            await store.acquire_async(f"k{i}", "a", 30)
        waiters = [asyncio.ensure_future(store.wait_released_async(f"k{i}", 3)) for i in range(20)]
        await asyncio.sleep(0.2)
        clients = await client.client_list()
        assert sum(1 for c in clients if int(c.get("sub", 0)) > 0) == 1
        for i in range(20):
            await store.release_async(f"k{i}", "a")
        assert all(await asyncio.gather(*waiters))
    finally:
        await store.aclose()
        await client.aclose()
