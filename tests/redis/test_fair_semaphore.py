"""Fair waiting on Redis semaphores (issue #16): the lock's FIFO queue, for `limit` slots.

A free slot goes only to one of the first (limit - holders) live waiters: waiters queued in a
known order take slots in that order (primitive and concurrency limiter, threads and asyncio,
standalone and Cluster), a newcomer never overtakes them, a waiter that gives up leaves the
queue, and an entry that is not refreshed expires.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import TYPE_CHECKING, Any

import pytest

from resilience import ResiliencePipelineBuilder
from resilience.primitives import semaphore
from resilience.stores import RedisSemaphoreStore

if TYPE_CHECKING:
    from collections.abc import Callable

WAITERS = 6
LIMIT = 2


def _queued(sync_redis: Any, store: RedisSemaphoreStore, key: str) -> list[str]:
    return [member.decode() for member in sync_redis.zrange(store.queue_keys(key)[0], 0, -1)]


def _until(condition: Callable[[], bool], what: str, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.002)


def test_waiters_take_slots_in_the_order_they_queued(sync_redis: Any, key: str) -> None:
    """Queued one after another (primitive and limiter alternating), they take the slots two by two, in order."""
    store = RedisSemaphoreStore(sync_redis)
    slots = semaphore(store, limit=LIMIT, ttl=5)
    limiter_key = f"semaphore:{key}"  # the key the primitive's prefixing gives `key`
    pipeline = (
        ResiliencePipelineBuilder().add_concurrency_limiter(LIMIT, key=limiter_key, store=store, ttl=5, wait=20).build()
    )
    holders = [slots.acquire(key), slots.acquire(key)]
    order: list[int] = []
    gates = [threading.Event() for _ in range(WAITERS)]

    def work(index: int) -> None:
        order.append(index)
        gates[index].wait(10)  # hold the slot until the test lets go: at most LIMIT run at once

    def waiter(index: int) -> None:
        if index % 2:
            pipeline.execute(lambda: work(index))
        else:
            with slots.hold(key, retries=200, retry_delay=0.1):
                work(index)

    threads = []
    try:
        for index in range(WAITERS):
            thread = threading.Thread(target=waiter, args=(index,))
            thread.start()
            threads.append(thread)
            _until(lambda n=index + 1: len(_queued(sync_redis, store, limiter_key)) == n, f"waiter {index} to queue")
        for holder in holders:
            assert holder is not None
            assert holder.release() is True
        for start in range(0, WAITERS, LIMIT):
            _until(lambda n=start + LIMIT: len(order) >= n, f"waiters {start}, {start + 1} to run")
            assert sorted(order[start : start + LIMIT]) == [start, start + 1]
            time.sleep(0.05)
            assert len(order) == start + LIMIT  # nobody else got in meanwhile
            for index in (start, start + 1):
                gates[index].set()
        for thread in threads:
            thread.join(10)
    finally:
        for gate in gates:
            gate.set()
        slots.close()
        store.close()
    assert sorted(order) == list(range(WAITERS))
    assert _queued(sync_redis, store, limiter_key) == []


async def test_async_waiters_take_slots_in_queue_order(async_redis: Any, sync_redis: Any, key: str) -> None:
    """The same with asyncio waiters: two by two, in arrival order."""
    store = RedisSemaphoreStore(async_client=async_redis)
    slots = semaphore(store, limit=LIMIT, ttl=5)
    holders = [await slots.acquire_async(key), await slots.acquire_async(key)]
    order: list[int] = []
    gates = [asyncio.Event() for _ in range(WAITERS)]

    async def waiter(index: int) -> None:
        async with slots.hold(key, retries=200, retry_delay=0.1):
            order.append(index)
            await asyncio.wait_for(gates[index].wait(), 10)

    tasks = []
    try:
        for index in range(WAITERS):
            tasks.append(asyncio.ensure_future(waiter(index)))
            deadline = time.monotonic() + 5
            while len(_queued(sync_redis, store, f"semaphore:{key}")) < index + 1:
                assert time.monotonic() < deadline
                await asyncio.sleep(0.002)
        for holder in holders:
            assert holder is not None
            assert await holder.release_async() is True
        for start in range(0, WAITERS, LIMIT):
            deadline = time.monotonic() + 5
            while len(order) < start + LIMIT:
                assert time.monotonic() < deadline, f"waiters {start}, {start + 1} to run"
                await asyncio.sleep(0.002)
            assert sorted(order[start : start + LIMIT]) == [start, start + 1]
            await asyncio.sleep(0.05)
            assert len(order) == start + LIMIT
            for index in (start, start + 1):
                gates[index].set()
        await asyncio.wait_for(asyncio.gather(*tasks), 10)
    finally:
        for gate in gates:
            gate.set()
        await slots.aclose()
        await store.aclose()
    assert sorted(order) == list(range(WAITERS))


def test_a_free_slot_goes_to_the_first_waiters_not_to_a_newcomer(sync_redis: Any, key: str) -> None:
    """No overtaking: a free slot is promised to the first (limit - holders) live waiters."""
    store = RedisSemaphoreStore(sync_redis)
    try:
        assert store.acquire(key, "h1", 10, LIMIT) is not None
        assert store.acquire(key, "h2", 10, LIMIT) is not None
        assert store.acquire_or_queue(key, "first", 10, LIMIT) == (None, pytest.approx(10, abs=0.5))
        for owner in ("second", "third"):
            assert store.acquire_or_queue(key, owner, 10, LIMIT)[0] is None
        assert store.release(key, "h1") is True
        assert store.acquire(key, "newcomer", 10, LIMIT) is None
        assert store.acquire_or_ttl(key, "newcomer", 10, LIMIT) == (None, None)
        assert store.acquire_or_queue(key, "second", 10, LIMIT) == (None, None)  # free, but promised to "first"
        assert store.wait_released(key, 0.05, "second", LIMIT) is False
        assert store.wait_released(key, 0.05, "first", LIMIT) is True
        assert store.release(key, "h2") is True  # two free: "second" need not wait for "first"
        assert store.acquire_or_queue(key, "third", 10, LIMIT) == (None, None)
        assert store.acquire_or_queue(key, "second", 10, LIMIT)[0] is not None
        assert store.acquire_or_queue(key, "first", 10, LIMIT)[0] is not None
        assert _queued(sync_redis, store, key) == ["third"]
        assert store.acquire_or_queue(key, "third", 10, LIMIT)[1] == pytest.approx(10, abs=0.5)
    finally:
        store.close()


def test_a_waiter_that_gives_up_leaves_and_a_crashed_one_expires(sync_redis: Any, key: str) -> None:
    """`release` by a waiter leaves the queue; an entry not refreshed expires, unblocking the slot."""
    store = RedisSemaphoreStore(sync_redis)
    try:
        assert store.acquire(key, "holder", 10, 1) is not None
        for owner in ("first", "crashed", "alive"):
            assert store.acquire_or_queue(key, owner, 10, 1)[0] is None
        assert store.release(key, "first") is False  # not a holder: it leaves the queue
        assert _queued(sync_redis, store, key) == ["crashed", "alive"]
        assert store.release(key, "holder") is True
        arrivals, expiries = store.queue_keys(key)
        assert 0 < sync_redis.pttl(arrivals) <= 3000  # the queue never outlives its entries
        assert 0 < sync_redis.pttl(expiries) <= 3000
        assert store.acquire_or_queue(key, "alive", 10, 1) == (None, None)
        sync_redis.zadd(expiries, {"crashed": 1})  # its entry expired
        assert store.acquire_or_queue(key, "alive", 10, 1)[0] is not None
        assert _queued(sync_redis, store, key) == []
    finally:
        store.close()


def test_leaving_and_releasing_announce_only_the_waiters_served(deployment: Any, sync_redis: Any, key: str) -> None:
    """A waiter that leaves, or a holder that releases, names only the waiters the free slots now serve."""
    store = RedisSemaphoreStore(sync_redis)
    channel = store.keys(key)[0]
    subscriber = deployment.sync_client()
    pubsub = subscriber.pubsub()
    subscribe = pubsub.ssubscribe if deployment.cluster else pubsub.subscribe
    read = pubsub.get_sharded_message if deployment.cluster else pubsub.get_message

    def messages() -> list[bytes]:
        found = []
        deadline = time.monotonic() + 0.3
        while time.monotonic() < deadline:
            message = read(timeout=0.05)
            if message is not None and message["type"] in {"message", "smessage"}:
                found.append(message["data"])
        return found

    try:
        subscribe(channel)
        _until(lambda: read(timeout=0.05) is not None, "the subscription")
        assert store.acquire(key, "holder", 10, 2) is not None
        for waiter, permits in (("big", 2), ("small", 1), ("last", 1)):
            assert store.acquire_or_queue(key, waiter, 10, 2, permits)[0] is None
        assert store.release(key, "stranger") is False
        assert messages() == []
        assert store.release(key, "big") is False  # one slot free: it serves "small" alone
        assert messages() == [b"h:small"]
        assert store.acquire_or_queue(key, "small", 10, 2)[0] is not None
        assert store.release(key, "holder") is True  # one slot freed: "last"
        assert messages() == [b"h:last"]
    finally:
        pubsub.close()
        subscriber.close()
        store.close()


@pytest.mark.parametrize("hostile", ["a}b", "a{}b", "{tag}x", "x{"])
def test_keys_with_braces_stay_in_one_slot(sync_redis: Any, key: str, hostile: str) -> None:
    """The queue keys share the semaphore's Cluster slot whatever braces the key has."""
    store = RedisSemaphoreStore(sync_redis)
    name = key + hostile
    try:
        assert store.acquire(name, "holder", 10, 1) is not None
        assert store.acquire_or_queue(name, "waiter", 10, 1)[0] is None
        assert store.release(name, "holder") is True
        assert store.acquire_or_queue(name, "waiter", 10, 1)[0] is not None
    finally:
        store.close()
