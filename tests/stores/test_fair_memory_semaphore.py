"""Fair waiting on `MemorySemaphoreStore`: the lock's FIFO queue, for `limit` slots (issue #16).

A free slot goes only to one of the first (limit - holders) live waiters: waiters queued in a
known order take slots in that order, a newcomer never overtakes them, a waiter that gives up
leaves the queue, and an entry that is not refreshed expires.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import TYPE_CHECKING

import pytest

from resilience import ResiliencePipelineBuilder
from resilience.primitives import semaphore
from resilience.stores import MemorySemaphoreStore
from resilience.testing import FakeTimeProvider

if TYPE_CHECKING:
    from collections.abc import Callable

WAITERS = 8
LIMIT = 2


def _queued(store: MemorySemaphoreStore, key: str) -> list[str]:
    return list(store._queues.get(key, {}))


def _until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + 5
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.001)


def test_eight_waiters_take_slots_in_the_order_they_queued() -> None:
    """Threads queued one after another (primitive and limiter alternating) take the slots in that order."""
    store = MemorySemaphoreStore()
    slots = semaphore(store, limit=LIMIT, ttl=5)
    pipeline = (
        ResiliencePipelineBuilder()
        .add_concurrency_limiter(LIMIT, key="semaphore:k", store=store, ttl=5, wait=10)
        .build()
    )
    holders = [slots.acquire("k"), slots.acquire("k")]
    assert all(holder is not None for holder in holders)
    order: list[int] = []
    gate = threading.Event()

    def work(index: int) -> None:
        order.append(index)
        gate.wait(5)  # hold the slot until the test lets go: at most LIMIT run at once

    def waiter(index: int) -> None:
        if index % 2:
            pipeline.execute(lambda: work(index))
        else:
            with slots.hold("k", retries=100, retry_delay=0.1):
                work(index)

    threads = []
    for index in range(WAITERS):
        thread = threading.Thread(target=waiter, args=(index,))
        thread.start()
        threads.append(thread)
        _until(lambda n=index + 1: len(_queued(store, "semaphore:k")) == n, f"waiter {index} to queue")
    for holder in holders:
        assert holder is not None
        assert holder.release() is True
    # Two at a time, in queue order: each pair starts only once the previous one let go.
    for start in range(0, WAITERS, LIMIT):
        _until(lambda n=start + LIMIT: len(order) >= n, f"waiters {start}, {start + 1} to run")
        assert sorted(order[start : start + LIMIT]) == [start, start + 1]
        assert len(order) == start + LIMIT
        gate.set()
        gate = threading.Event()
        time.sleep(0.01)
    gate.set()
    for thread in threads:
        thread.join(5)
    assert sorted(order) == list(range(WAITERS))
    assert _queued(store, "semaphore:k") == []


async def test_async_waiters_take_slots_in_queue_order() -> None:
    """The same with asyncio tasks: each slot, as it frees, goes to the longest waiter."""
    store = MemorySemaphoreStore()
    slots = semaphore(store, limit=LIMIT, ttl=5)
    holders = [await slots.acquire_async("k"), await slots.acquire_async("k")]
    order: list[int] = []

    async def waiter(index: int) -> None:
        async with slots.hold("k", retries=100, retry_delay=0.1):
            order.append(index)
            await asyncio.sleep(0.01)

    tasks = []
    for index in range(WAITERS):
        tasks.append(asyncio.ensure_future(waiter(index)))
        while len(_queued(store, "semaphore:k")) < index + 1:
            await asyncio.sleep(0)
    for holder in holders:
        assert holder is not None
        assert await holder.release_async() is True
    await asyncio.wait_for(asyncio.gather(*tasks), 5)
    assert order == list(range(WAITERS))
    assert _queued(store, "semaphore:k") == []


def test_no_overtaking_leaving_and_expiry() -> None:
    """Free slots go to the first (limit - holders) live waiters; leaving or expiring hands them on."""
    clock = FakeTimeProvider()
    store = MemorySemaphoreStore(clock)
    assert store.acquire("k", "h1", 10, LIMIT) is not None
    assert store.acquire("k", "h2", 10, LIMIT) is not None
    for owner in ("first", "second", "third", "fourth"):
        assert store.acquire_or_queue("k", owner, 10, LIMIT) == (None, 10)
    assert store.release("k", "h1") is True  # one slot free: only "first" may take it
    assert store.acquire("k", "newcomer", 10, LIMIT) is None
    assert store.acquire_or_ttl("k", "newcomer", 10, LIMIT) == (None, None)
    assert store.acquire_or_queue("k", "second", 10, LIMIT) == (None, None)
    assert store.release("k", "first") is False  # the first gives up: the slot passes to "second"
    assert store.acquire_or_queue("k", "third", 10, LIMIT) == (None, None)
    assert store.acquire_or_queue("k", "second", 10, LIMIT)[0] is not None
    assert _queued(store, "k") == ["third", "fourth"]
    assert store.release("k", "h2") is True  # one slot free again: "third" never comes back
    clock.advance(2)
    assert store.acquire_or_queue("k", "fourth", 10, LIMIT) == (None, None)
    clock.advance(2)  # "third"'s entry expired; "fourth" refreshed its own
    assert store.acquire_or_queue("k", "fourth", 10, LIMIT)[0] is not None
    assert _queued(store, "k") == []


def test_two_free_slots_go_to_the_first_two_waiters() -> None:
    """With limit - holders = 2, the second waiter need not wait for the first."""
    store = MemorySemaphoreStore()
    for owner in ("h1", "h2"):
        assert store.acquire("k", owner, 10, LIMIT) is not None
    for owner in ("first", "second", "third"):
        assert store.acquire_or_queue("k", owner, 10, LIMIT)[0] is None
    assert store.release("k", "h1") is True
    assert store.release("k", "h2") is True
    assert store.acquire_or_queue("k", "third", 10, LIMIT) == (None, None)
    assert store.acquire_or_queue("k", "second", 10, LIMIT)[0] is not None
    assert store.acquire_or_queue("k", "first", 10, LIMIT)[0] is not None
    assert store.acquire_or_queue("k", "third", 10, LIMIT) == (None, pytest.approx(10, abs=0.5))
    assert store.wait_released("k", 0.01, "third", LIMIT) is False
    assert store.release("k", "first") is True
    assert store.wait_released("k", 0.01, "third", LIMIT) is True  # a slot is free for it


def test_a_waiter_that_gives_up_wakes_only_the_waiters_now_served() -> None:
    """Leaving the queue calls back the waiters that the free slots now serve, and nobody else."""
    store = MemorySemaphoreStore()
    assert store.acquire("k", "holder", 10, 2) is not None
    woken: list[str] = []
    for owner, permits in (("big", 2), ("small", 1), ("last", 1)):
        assert store.acquire_or_queue("k", owner, 10, 2, permits)[0] is None
        store.add_release_listener("k", lambda owner=owner: woken.append(owner), owner)
    assert store.release("k", "stranger") is False
    assert woken == []
    assert store.release("k", "big") is False  # one slot free: it serves "small" only
    assert woken == ["small"]
    woken.clear()
    assert store.release("k", "small") is False
    assert woken == ["last"]


def test_the_queue_is_bounded_and_forgotten() -> None:
    """Beyond the bound a waiter is refused without queueing; nothing stays once the waiters are gone."""
    clock = FakeTimeProvider()
    store = MemorySemaphoreStore(clock)
    assert store.acquire("k", "holder", 10, 1) is not None
    for index in range(1000):
        store.acquire_or_queue("k", f"w{index}", 10, 1)
    assert store.acquire_or_queue("k", "late", 10, 1)[0] is None
    assert len(_queued(store, "k")) == 1000
    assert "late" not in store._queues["k"]
    clock.advance(20)
    assert store.acquire("k", "after", 10, 1) is not None  # every entry expired, and the holder's lease
    assert _queued(store, "k") == []
