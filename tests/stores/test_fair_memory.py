"""Fair waiting on `MemoryLockStore`: the same FIFO order as the Redis store (DESIGN §2.8 rev. 2)."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import TYPE_CHECKING

from resilience import ResiliencePipelineBuilder
from resilience.primitives import lock
from resilience.stores import MemoryLockStore
from resilience.testing import FakeTimeProvider

if TYPE_CHECKING:
    from collections.abc import Callable

WAITERS = 8


def _queued(store: MemoryLockStore, key: str) -> list[str]:
    return list(store._queues.get(key, {}))


def _until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + 2
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.001)


def test_eight_waiters_acquire_in_the_order_they_queued() -> None:
    """Threads queued one after another (primitive and strategy alternating) get the lock in that order."""
    store = MemoryLockStore()
    locks = lock(store, ttl=5)
    pipeline = ResiliencePipelineBuilder().add_lock("lock:k", ttl=5, wait=10, store=store).build()
    holder = locks.acquire("k")
    assert holder is not None
    order: list[int] = []

    def waiter(index: int) -> None:
        if index % 2:
            pipeline.execute(lambda: order.append(index))
        else:
            with locks.hold("k", retries=100, retry_delay=0.1):
                order.append(index)

    threads = []
    for index in range(WAITERS):
        thread = threading.Thread(target=waiter, args=(index,))
        thread.start()
        threads.append(thread)
        _until(lambda n=index + 1: len(_queued(store, "lock:k")) == n, f"waiter {index} to queue")
    assert holder.release() is True
    for thread in threads:
        thread.join(5)
    assert order == list(range(WAITERS))
    assert _queued(store, "lock:k") == []


async def test_async_waiters_acquire_in_queue_order() -> None:
    """The same with asyncio tasks."""
    store = MemoryLockStore()
    locks = lock(store, ttl=5)
    holder = await locks.acquire_async("k")
    assert holder is not None
    order: list[int] = []

    async def waiter(index: int) -> None:
        async with locks.hold("k", retries=100, retry_delay=0.1):
            order.append(index)
            await asyncio.sleep(0)

    tasks = []
    for index in range(WAITERS):
        tasks.append(asyncio.ensure_future(waiter(index)))
        while len(_queued(store, "lock:k")) < index + 1:
            await asyncio.sleep(0)
    assert await holder.release_async() is True
    await asyncio.wait_for(asyncio.gather(*tasks), 5)
    assert order == list(range(WAITERS))


def test_no_barging_and_leaving_passes_the_turn() -> None:
    """A free lock goes to the live head; a head that leaves or whose entry expires hands it on."""
    clock = FakeTimeProvider()
    store = MemoryLockStore(clock)
    assert store.acquire("k", "holder", 10) is not None
    for owner in ("first", "second", "third"):
        assert store.acquire_or_queue("k", owner, 10) == (None, 10)
    assert store.release("k", "holder") is True
    assert store.acquire("k", "newcomer", 10) is None
    assert store.release("k", "first") is False  # the head gives up its turn
    clock.advance(2)
    assert store.acquire_or_queue("k", "third", 10) == (None, None)  # "second" has the turn
    clock.advance(2)  # "second" never came back: its entry expired; "third" refreshed its own
    assert store.acquire_or_queue("k", "third", 10)[0] is not None
    assert _queued(store, "k") == []


def test_only_the_head_is_woken() -> None:
    """A release calls back the head's listener and any listener without an owner, nobody else."""
    store = MemoryLockStore()
    assert store.acquire("k", "holder", 10) is not None
    woken: list[str] = []
    for owner in ("first", "second"):
        assert store.acquire_or_queue("k", owner, 10)[0] is None
        store.add_release_listener("k", lambda owner=owner: woken.append(owner), owner)
    store.add_release_listener("k", lambda: woken.append("anyone"))
    assert store.release("k", "holder") is True
    assert sorted(woken) == ["anyone", "first"]
