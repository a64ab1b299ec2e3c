"""`renew_many` on Redis: many owner-checked renewals in one pipelined round trip, each answered as `renew` would.

On a real server and a real 3-master Cluster (the keys spread over every node), sync and async.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest
import redis

from resilience.exceptions import ValidationError
from resilience.stores import (
    AsyncSupportsRenewMany,
    RedisLockStore,
    RedisSemaphoreStore,
    SupportsRenewMany,
    serves,
)
from tests.redis_support import Roundtrips

if TYPE_CHECKING:
    from conftest import Deployment, Flavour

pytestmark = pytest.mark.redis

COUNT = 24
"""Enough keys to land on each of the Cluster's three masters."""


def test_both_stores_offer_the_capability(sync_redis: Any, async_redis: Any) -> None:
    for store in (
        RedisLockStore(sync_redis, async_client=async_redis),
        RedisSemaphoreStore(sync_redis, async_client=async_redis),
    ):
        assert serves(store, SupportsRenewMany)
        assert serves(store, AsyncSupportsRenewMany)
    assert not serves(RedisLockStore(async_client=async_redis), SupportsRenewMany)
    assert not serves(RedisLockStore(sync_redis), AsyncSupportsRenewMany)


async def _world(store: Flavour, key: str) -> tuple[list[tuple[str, str, float]], list[bool]]:
    """Leases of `me`, with one held by another owner and one never taken in the middle."""
    keys = [f"{key}:{n}" for n in range(COUNT)]
    for n, each in enumerate(keys):
        if n == COUNT // 2:
            continue  # never acquired: not ours to renew
        owner = "other" if n == COUNT // 3 else "me"
        assert await store.call(
            "acquire", each, owner, 10.0, *([2] if isinstance(store.store, RedisSemaphoreStore) else [])
        )
    items = [(each, "me", 30.0) for each in keys]
    expected = [n not in (COUNT // 3, COUNT // 2) for n in range(COUNT)]
    return items, expected


async def test_lock_answers_are_renews(locks: Flavour, key: str, sync_redis: Any) -> None:
    """Each answer is `renew`'s for that lease; a foreign-owned and a missing lease in the middle answer False."""
    items, expected = await _world(locks, key)
    assert await locks.call("renew_many", items) == expected
    assert [await locks.renew(*item) for item in items] == expected
    store = locks.store
    foreign = sync_redis.pttl(store.key(items[COUNT // 3][0]))
    assert 0 < foreign <= 10_000  # the other owner's lease was not touched
    assert sync_redis.exists(store.key(items[COUNT // 2][0])) == 0  # nothing was created
    assert all(sync_redis.pttl(store.key(k)) > 20_000 for (k, _, _), ok in zip(items, expected, strict=True) if ok)


async def test_semaphore_answers_are_renews(semaphores: Flavour, key: str) -> None:
    items, expected = await _world(semaphores, key)
    assert await semaphores.call("renew_many", items) == expected
    assert [await semaphores.renew(*item) for item in items] == expected


async def test_one_failing_command_fails_only_its_lease(locks: Flavour, key: str, sync_redis: Any) -> None:
    """A key of the wrong type fails that script alone; a refused ttl is that item's error, never sent."""
    items, expected = await _world(locks, key)
    sync_redis.set(locks.store.key(items[1][0]), "not a hash")
    items[2] = (items[2][0], "me", -1.0)
    answers = await locks.call("renew_many", items)
    assert isinstance(answers[1], redis.ResponseError)
    assert "WRONGTYPE" in str(answers[1])
    assert isinstance(answers[2], ValidationError)
    assert answers[:1] + answers[3:] == expected[:1] + expected[3:]


async def test_noscript_is_answered_by_eval(locks: Flavour, deployment: Deployment, key: str) -> None:
    """After SCRIPT FLUSH on every node, the batch still answers: the NOSCRIPT replies go again as EVAL."""
    items, expected = await _world(locks, key)
    deployment.script_flush()
    assert await locks.call("renew_many", items) == expected
    assert await locks.call("renew_many", items) == expected  # EVAL cached it again


async def test_empty_batch(locks: Flavour) -> None:
    assert await locks.call("renew_many", []) == []


def test_one_pipeline_per_batch(deployment: Deployment, key: str) -> None:
    """The batch goes out as one pipeline (redis-py's Cluster pipeline: one round trip per node); no EVALSHA per lease."""
    client = deployment.sync_client()
    try:
        store = RedisLockStore(client)
        items = [(f"{key}:{n}", "me", 10.0) for n in range(COUNT)]
        for each, _, _ in items:
            store.acquire(each, "me", 10.0)
        store.renew_many(items)  # every node has the script cached now (an earlier test flushed them)
        counter = Roundtrips(client)
        assert store.renew_many(items) == [True] * COUNT
        assert counter.pipelines == [COUNT]
        assert counter.singles == 0
    finally:
        client.close()


def test_a_lost_connection_raises_for_the_whole_batch(fresh_redis_server: Any, key: str) -> None:
    """A round trip that fails as a whole raises (the runtime reports it as every lease's failure)."""
    client = redis.Redis(host=fresh_redis_server.host, port=fresh_redis_server.port, socket_timeout=1)
    try:
        store = RedisLockStore(client)
        assert store.acquire(key, "me", 10.0)
        fresh_redis_server.stop()
        with pytest.raises(redis.ConnectionError):
            store.renew_many([(key, "me", 10.0), (f"{key}:2", "me", 10.0)])
    finally:
        client.close()


def _mislead(client: Any, keys: list[str]) -> None:
    """Point the client's slot table for `keys` at a master that does not serve them (a stale table)."""
    primaries = client.get_primaries()
    for each in keys:
        slot = client.keyslot(each)
        owner = client.nodes_manager.slots_cache[slot][0]
        client.nodes_manager.slots_cache[slot] = [next(p for p in primaries if p.name != owner.name)]


async def test_a_stale_slot_table_is_redirected(deployment: Deployment, key: str) -> None:
    """Cluster: a command sent to the wrong node (MOVED) is sent again where its slot lives, sync and async."""
    if not deployment.cluster:
        pytest.skip("Cluster only")
    client = deployment.sync_client()
    aclient = deployment.async_client()
    try:
        await aclient.initialize()
        store = RedisLockStore(client, async_client=aclient)
        items = [(f"{key}:{n}", "me", 10.0) for n in range(6)]
        for each, _, _ in items:
            assert store.acquire(each, "me", 10.0)
        store.renew_many(items)  # the script cached on every node
        first = store.key(items[0][0])
        served_by = client.get_node_from_key(first).name
        _mislead(client, [store.key(each) for each, _, _ in items])
        assert client.get_node_from_key(first).name != served_by
        assert store.renew_many(items) == [True] * 6
        _mislead(aclient, [store.key(each) for each, _, _ in items])
        assert await store.renew_many_async(items) == [True] * 6
    finally:
        client.close()
        await aclient.aclose()
