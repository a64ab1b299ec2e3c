"""Data loss and outages on a server of the test's own: tokens keep increasing, errors pass through."""

from __future__ import annotations

import asyncio
import os
import threading
import time
import warnings
from typing import TYPE_CHECKING, Any

import pytest
import redis
import redis.asyncio
import redis.backoff
import redis.retry

from resilience.stores import RedisLockStore, RedisSemaphoreStore

if TYPE_CHECKING:
    from collections.abc import Callable

    from tests.redis_support import RedisServer

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


def _wake_after_release(store: RedisLockStore, key: str, owner: str) -> bool:
    """Release `key` from another thread in 0.1 s and report whether a waiter woke early."""
    releaser = threading.Timer(0.1, lambda: store.release(key, owner))
    releaser.start()
    started = time.monotonic()
    woke = store.wait_released(key, 3)
    releaser.join()
    return woke and time.monotonic() - started < 2


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_gets_its_own_listener(redis_server: RedisServer) -> None:
    """After fork the child never reads the parent's subscription: it opens its own."""
    client = redis.Redis(port=redis_server.port)
    store = RedisLockStore(client)
    try:
        store.acquire("fork:parent", "a", 10)
        assert store.wait_released("fork:parent", 0.05) is False  # the parent's listener runs
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # fork with threads (3.12+)
            pid = os.fork()
        if pid == 0:  # pragma: no cover - the child reports through its exit code
            code = 1
            try:
                store.acquire("fork:child", "c", 10)
                code = 0 if _wake_after_release(store, "fork:child", "c") else 1
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        assert _wake_after_release(store, "fork:parent", "a")
    finally:
        store.close()
        client.close()
