"""Invariants under concurrency and random operation sequences, on a real server."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from resilience.stores import RedisLockStore, RedisSemaphoreStore

pytestmark = pytest.mark.redis


def test_threads_never_overlap(sync_redis: Any, key: str) -> None:
    """Eight threads contending for one key: never two inside, every token larger than the last."""
    store = RedisLockStore(sync_redis)
    inside = 0
    tokens: list[int] = []
    guard = threading.Lock()
    errors: list[str] = []

    def worker(n: int) -> None:
        nonlocal inside
        owner = f"worker-{n}"
        entered = 0
        while entered < 15:
            token = store.acquire(key, owner, 5)
            if token is None:
                continue
            with guard:
                inside += 1
                if inside != 1:
                    errors.append("two holders")
                tokens.append(token)
            with guard:
                inside -= 1
            assert store.release(key, owner)
            entered += 1

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert not errors
    assert len(tokens) == 120
    assert tokens == sorted(set(tokens))


async def test_tasks_share_a_semaphore_within_its_limit(async_redis: Any, key: str) -> None:
    """Twenty tasks on a semaphore of three: at most three inside at any time, all get in."""
    store = RedisSemaphoreStore(async_client=async_redis)
    # redis-py's asyncio Cluster client can race its own first connection when twenty tasks
    # start on a cold client at once; one call first warms it.
    assert await store.acquire_async(key, "warm-up", 5, 3)
    assert await store.release_async(key, "warm-up")
    inside = 0
    peak = 0
    done = 0

    async def worker(n: int) -> None:
        nonlocal inside, peak, done
        owner = f"task-{n}"
        while await store.acquire_async(key, owner, 5, 3) is None:
            await store.wait_released_async(key, 0.2)
        inside += 1
        peak = max(peak, inside)
        await asyncio.sleep(0.005)
        inside -= 1
        assert await store.release_async(key, owner)
        done += 1

    await asyncio.wait_for(asyncio.gather(*(worker(n) for n in range(20))), 30)
    await store.aclose()
    assert done == 20
    assert 1 <= peak <= 3


OPERATIONS = st.lists(
    st.tuples(st.sampled_from(["acquire", "renew", "release", "lose data"]), st.sampled_from("abc")),
    min_size=1,
    max_size=25,
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(operations=OPERATIONS)
def test_random_sequences_keep_the_lock_invariants(redis_server: Any, operations: list[tuple[str, str]]) -> None:
    """Against a model: one holder, owner checks, same-owner idempotence, tokens only increase."""
    import uuid

    import redis

    client = redis.Redis(port=redis_server.port)
    store = RedisLockStore(client)
    key = f"hypothesis:{uuid.uuid4().hex}"
    holder: str | None = None
    held_token: int | None = None
    last = 0
    try:
        for operation, owner in operations:
            if operation == "acquire":
                token = store.acquire(key, owner, 30)
                if holder is None or holder == owner:
                    assert token is not None
                    if holder == owner:
                        assert token == held_token
                    else:
                        assert token > last
                    holder, held_token, last = owner, token, max(last, token)
                else:
                    assert token is None
            elif operation == "renew":
                assert store.renew(key, owner, 30) is (holder == owner)
            elif operation == "release":
                assert store.release(key, owner) is (holder == owner)
                if holder == owner:
                    holder = held_token = None
            else:  # the server loses the key (FLUSHALL, eviction, failover): the lease goes too
                client.delete(store.key(key))
                holder = held_token = None
    finally:
        client.delete(store.key(key))
        client.close()
