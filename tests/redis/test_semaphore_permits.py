"""Semaphore permits on Redis (DESIGN §2.21), standalone and Cluster, sync and asyncio.

A holder takes `permits` slots at once; waiters are served in arrival order (a big request at
the head is not overtaken); a release wakes only the queued waiters its freed slots serve,
counted by the server (`INFO commandstats`: one `PUBLISH` per waiter woken, none for the rest).
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import TYPE_CHECKING, Any

import pytest
import redis

from resilience.primitives import semaphore
from resilience.stores import RedisSemaphoreStore

if TYPE_CHECKING:
    from collections.abc import Callable

    from tests.redis_support import RedisServer

pytestmark = pytest.mark.redis

WAITERS = 8


def _commands(admin: redis.Redis) -> dict[str, int]:
    stats = admin.info("commandstats")
    return {name.removeprefix("cmdstat_"): int(value["calls"]) for name, value in stats.items()}


def _delta(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    return {name: calls - before.get(name, 0) for name, calls in after.items() if calls != before.get(name, 0)}


def _until(condition: Callable[[], bool], what: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.005)


@pytest.mark.timeout(60)
def test_a_release_wakes_only_the_waiters_its_slots_serve(fresh_redis_server: RedisServer) -> None:
    """8 queued waiters: freeing 4 slots publishes 4 turns, freeing 1 publishes 1, a blocked head 0."""
    admin = redis.Redis(port=fresh_redis_server.port)
    store = RedisSemaphoreStore(redis.Redis(port=fresh_redis_server.port))
    try:
        assert store.acquire("k", "warm", 30, 4) is not None  # scripts loaded
        assert store.release("k", "warm") is True
        assert store.acquire("k", "holder", 30, 4, 4) is not None
        for index in range(WAITERS):
            assert store.acquire_or_queue("k", f"w{index}", 30, 4)[0] is None

        before = _commands(admin)
        assert store.release("k", "holder") is True
        spent = _delta(before, _commands(admin))
        assert spent.get("publish") == 4, spent  # w0..w3: the 4 freed slots serve 4 waiters, not 8
        # The whole release, as the server counts it (docs/performance.md): 19 commands, the EVALSHA
        # and 4 PUBLISHes among them, whatever the number of waiters behind the ones served.
        release_cost = sum(calls for name, calls in spent.items() if name != "info")
        assert release_cost <= 20, spent

        for index in range(4):
            assert store.acquire_or_queue("k", f"w{index}", 30, 4)[0] is not None
        before = _commands(admin)
        assert store.release("k", "w0") is True
        spent = _delta(before, _commands(admin))
        assert spent.get("publish") == 1, spent  # w4 only

        # A head that does not fit: nobody behind it is woken.
        assert store.acquire_or_queue("k", "w4", 30, 4)[0] is not None
        assert store.acquire_or_queue("k", "big", 30, 4, 2)[0] is None  # queued behind w5..w7
        for index in (5, 6, 7):
            assert store.release("k", f"w{index}") is False  # they give up: "big" heads the queue
        assert store.acquire_or_queue("k", "small", 30, 4)[0] is None
        before = _commands(admin)
        assert store.release("k", "w1") is True  # one slot free: "big" (2) does not fit, "small" waits
        assert "publish" not in _delta(before, _commands(admin))
        before = _commands(admin)
        assert store.release("k", "w2") is True  # two free: "big" is served, "small" still not
        assert _delta(before, _commands(admin)).get("publish") == 1
    finally:
        store.close()
        admin.close()


@pytest.mark.timeout(60)
def test_a_release_also_announces_the_slots_of_a_lapsed_holder(fresh_redis_server: RedisServer) -> None:
    """A holder whose lease ran out announced nothing: the next release names the waiters its slots serve too."""
    admin = redis.Redis(port=fresh_redis_server.port)
    store = RedisSemaphoreStore(redis.Redis(port=fresh_redis_server.port))
    try:
        started = time.monotonic()
        assert store.acquire("k", "lapsed", 2, 3, 2) is not None
        assert store.acquire("k", "holder", 30, 3) is not None
        for index in range(4):
            assert store.acquire_or_queue("k", f"w{index}", 30, 3)[0] is None
        # "lapsed" expires: 2 slots free, unannounced (the waiters' entries live 3 s from joining).
        time.sleep(max(0.0, started + 2.3 - time.monotonic()))
        before = _commands(admin)
        assert store.release("k", "holder") is True
        assert _delta(before, _commands(admin)).get("publish") == 3  # w0, w1, w2
    finally:
        store.close()
        admin.close()


@pytest.mark.timeout(120)
@pytest.mark.parametrize("flavour", ["sync", "async"])
def test_a_big_request_at_the_head_goes_first(deployment: Any, flavour: str) -> None:
    """A waiter for all 3 slots, queued first, runs before 4 later single-slot waiters (threads or tasks)."""
    order: list[str] = []
    if flavour == "sync":
        client = deployment.sync_client()
        slots = semaphore(client, limit=3, ttl=10)
        key = f"big-first:{time.monotonic_ns()}"
        holder = slots.acquire(key, permits=3)
        assert holder is not None
        queue = RedisSemaphoreStore(client).queue_keys(key)[0]

        def waiter(name: str, permits: int) -> None:
            slots.run(key, lambda _handle: order.append(name), wait=60, permits=permits)

        big = threading.Thread(target=waiter, args=("big", 3))
        big.start()
        _until(lambda: client.zcard(queue) == 1, "the big waiter to queue")
        smalls = [threading.Thread(target=waiter, args=(f"s{i}", 1)) for i in range(4)]
        for thread in smalls:
            thread.start()
        _until(lambda: client.zcard(queue) == 5, "the small waiters to queue")
        assert holder.release()
        for thread in [big, *smalls]:
            thread.join(60)
        slots.close()
        client.close()
    else:

        async def main() -> None:
            client = deployment.async_client()
            slots = semaphore(client, limit=3, ttl=10)
            key = f"big-first:{time.monotonic_ns()}"
            holder = await slots.acquire_async(key, permits=3)
            assert holder is not None
            inspect = deployment.sync_client()
            queue = RedisSemaphoreStore(inspect).queue_keys(key)[0]

            async def record(name: str) -> None:
                order.append(name)

            async def waiter(name: str, permits: int) -> None:
                await slots.run_async(key, lambda _handle: record(name), wait=60, permits=permits)

            async def queued(count: int) -> None:
                deadline = time.monotonic() + 20
                while inspect.zcard(queue) != count:
                    assert time.monotonic() < deadline
                    await asyncio.sleep(0.005)

            big = asyncio.create_task(waiter("big", 3))
            await queued(1)
            smalls = [asyncio.create_task(waiter(f"s{i}", 1)) for i in range(4)]
            await queued(5)
            assert await holder.release_async()
            await asyncio.wait_for(asyncio.gather(big, *smalls), 60)
            await slots.aclose()
            await client.aclose()
            inspect.close()

        asyncio.run(main())
    assert order[0] == "big", order
    assert sorted(order[1:]) == ["s0", "s1", "s2", "s3"]
