"""Fair waiting on Redis locks (DESIGN §2.8 revision 2): a FIFO queue kept in Redis.

Waiters queued in a known order acquire in that order, across the primitive and the lock
strategy, sync and async, on a standalone server and on Cluster; a release announces only the
head's turn, and nothing when nobody waits; a waiter that gives up or crashes never blocks
the queue.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import TYPE_CHECKING, Any

import pytest

from resilience import ResiliencePipelineBuilder
from resilience.primitives import lock
from resilience.stores import RedisLockStore
from resilience.stores._redis import companions

if TYPE_CHECKING:
    from collections.abc import Callable

    from tests.redis.conftest import Deployment

WAITERS = 8


def _queued(sync_redis: Any, lock_key: str) -> list[str]:
    queue = companions(lock_key)
    assert queue is not None
    return [member.decode() for member in sync_redis.zrange(queue[0], 0, -1)]


def _until(condition: Callable[[], bool], what: str, timeout: float = 2.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.002)


def test_eight_waiters_acquire_in_the_order_they_queued(sync_redis: Any, key: str) -> None:
    """Queued one after another (primitive and strategy alternating), they get the lock in that order."""
    locks = lock(sync_redis, ttl=5)
    strategy_store = RedisLockStore(sync_redis)
    holder = locks.acquire(key)
    assert holder is not None
    order: list[int] = []

    def waiter(index: int) -> None:
        if index % 2:
            pipeline = ResiliencePipelineBuilder().add_lock(key, ttl=5, wait=10, store=strategy_store).build()
            pipeline.execute(lambda: order.append(index))
        else:
            with locks.hold(key, retries=100, retry_delay=0.1):
                order.append(index)

    threads = []
    try:
        for index in range(WAITERS):
            thread = threading.Thread(target=waiter, args=(index,))
            thread.start()
            threads.append(thread)
            _until(lambda n=index + 1: len(_queued(sync_redis, f"lock:{key}")) == n, f"waiter {index} to queue")
        assert holder.release() is True
        for thread in threads:
            thread.join(5)
    finally:
        strategy_store.close()
        locks.close()
    assert order == list(range(WAITERS))
    assert _queued(sync_redis, f"lock:{key}") == []


async def test_async_waiters_acquire_in_queue_order(async_redis: Any, sync_redis: Any, key: str) -> None:
    """The same with asyncio waiters: each woken by its own turn, in arrival order."""
    locks = lock(async_redis, ttl=5)
    holder = await locks.acquire_async(key)
    assert holder is not None
    order: list[int] = []

    async def waiter(index: int) -> None:
        async with locks.hold(key, retries=100, retry_delay=0.1):
            order.append(index)

    tasks = []
    for index in range(WAITERS):
        tasks.append(asyncio.ensure_future(waiter(index)))
        deadline = time.monotonic() + 2
        while len(_queued(sync_redis, f"lock:{key}")) < index + 1:
            assert time.monotonic() < deadline
            await asyncio.sleep(0.002)
    assert await holder.release_async() is True
    await asyncio.wait_for(asyncio.gather(*tasks), 5)
    await locks.aclose()
    assert order == list(range(WAITERS))


def test_a_free_lock_goes_to_the_head_not_to_a_newcomer(sync_redis: Any, key: str) -> None:
    """No barging: while the head has its turn, a fail-fast acquire by anyone else is refused."""
    store = RedisLockStore(sync_redis)
    try:
        assert store.acquire(key, "holder", 10) is not None
        assert store.acquire_or_queue(key, "first", 10) == (None, pytest.approx(10, abs=0.5))
        assert store.acquire_or_queue(key, "second", 10)[0] is None
        assert store.release(key, "holder") is True
        assert store.acquire(key, "newcomer", 10) is None
        # Free, but promised to "first": "second" is told when the head's entry (3 s) runs out.
        assert store.acquire_or_queue(key, "second", 10) == (None, pytest.approx(3, abs=0.5))
        assert store.acquire_or_queue(key, "first", 10)[0] is not None
        assert _queued(sync_redis, store.key(key)) == ["second"]
    finally:
        store.close()


def test_the_hash_marks_a_queue_until_a_release_finds_it_empty(sync_redis: Any, key: str) -> None:
    """Field `q` of the lock's hash: set by the first waiter, cleared by the release that empties the queue.

    Without it an acquire and a release skip the queue; a hash that lost its token (the holder's
    lease expired, with the mark) says nothing, so the queue is checked: no barging then either.
    """
    store = RedisLockStore(sync_redis)
    name = store.key(key)
    try:
        assert store.acquire(key, "warm", 10) is not None
        assert store.release(key, "warm") is True  # a tombstone: the hash has a token, no mark
        assert store.acquire(key, "holder", 10) is not None
        assert sync_redis.hget(name, "q") is None
        assert store.acquire_or_queue(key, "first", 10)[0] is None
        assert store.acquire_or_queue(key, "second", 10)[0] is None
        assert sync_redis.hget(name, "q") is not None
        sync_redis.delete(name)  # the holder's lease expired: token and mark gone, the queue stays
        assert store.acquire(key, "newcomer", 10) is None
        assert store.acquire_or_queue(key, "first", 10)[0] is not None
        assert sync_redis.hget(name, "q") is not None  # the hash's first token, with a queue
        assert store.release(key, "first") is True  # hands on to "second"
        assert sync_redis.hget(name, "owner") == b"second"
        assert store.acquire_or_queue(key, "second", 10)[0] is not None
        assert store.release(key, "second") is True  # the queue is empty: the mark goes
        assert sync_redis.hget(name, "q") is None
        assert store.acquire(key, "after", 10) is not None
        assert store.release(key, "after") is True
    finally:
        store.close()


def test_an_entry_queued_without_the_mark_is_served_once_a_waiter_marks_the_queue(sync_redis: Any, key: str) -> None:
    """A rolling upgrade: an older version's waiter queues without marking the lock's hash.

    Its entry is honoured in order as soon as a current waiter joins the same queue (which
    marks it); until then a current release frees the lock instead of handing it on, and the
    older waiter takes it at its next attempt (its backoff, at most 1 s).
    """
    store = RedisLockStore(sync_redis)
    name = store.key(key)
    queue = store.queue_keys(key)
    assert queue is not None
    try:
        assert store.acquire(key, "warm", 10) is not None
        assert store.release(key, "warm") is True
        assert store.acquire(key, "holder", 10) is not None
        seconds, micros = sync_redis.time()
        sync_redis.zadd(queue[0], {"older": seconds * 1_000_000 + micros})  # as the older script did
        sync_redis.pexpire(queue[0], 3000)
        assert store.acquire_or_queue(key, "current", 10)[0] is None
        assert store.release(key, "holder") is True
        assert sync_redis.hget(name, "owner") == b"older"
        assert _queued(sync_redis, name) == ["current"]
        assert sync_redis.pttl(queue[0]) > 3000  # the current waiter set the key to live as long as its entry
    finally:
        store.release(key, "older")
        store.release(key, "current")
        store.close()


def test_a_waiter_that_gives_up_passes_the_turn_on(sync_redis: Any, key: str) -> None:
    """`release` by a waiter leaves the queue; the head giving up the lock handed to it hands it on."""
    store = RedisLockStore(sync_redis)
    try:
        assert store.acquire(key, "holder", 10) is not None
        for owner in ("first", "second", "third"):
            assert store.acquire_or_queue(key, owner, 10)[0] is None
        assert store.release(key, "second") is False  # not the holder: it leaves the queue
        assert _queued(sync_redis, store.key(key)) == ["first", "third"]
        assert store.release(key, "holder") is True
        # The release handed the lock to "first": it gives it up like a holder, to the next.
        assert store.release(key, "first") is True
        assert store.acquire(key, "newcomer", 10) is None
        assert store.acquire_or_queue(key, "third", 10)[0] is not None
    finally:
        store.close()


def test_a_crashed_waiter_drops_out_of_the_queue(sync_redis: Any, key: str) -> None:
    """An entry that is not refreshed expires (here: its arrival moved to the past); the lock goes to the next."""
    store = RedisLockStore(sync_redis)
    try:
        assert store.acquire(key, "holder", 10) is not None
        assert store.acquire_or_queue(key, "crashed", 10)[0] is None
        assert store.acquire_or_queue(key, "alive", 10)[0] is None
        queue = store.queue_keys(key)
        assert queue is not None
        # the queue key outlives its newest entry by one entry life and a second at most (the
        # expiry is set two entry lives ahead, so that the next waiters need not set it)
        assert 3000 < sync_redis.pttl(queue[0]) <= 2 * 3000 + 1000
        sync_redis.zadd(queue[0], {"crashed": 1})  # queued long ago, never tried again
        assert store.release(key, "holder") is True
        assert store.acquire_or_queue(key, "alive", 10)[0] is not None
        assert _queued(sync_redis, store.key(key)) == []
    finally:
        store.close()


@pytest.mark.slow
def test_a_crashed_head_delays_the_lock_by_its_entry_and_one_backoff_step(sync_redis: Any, key: str) -> None:
    """docs/redis.md: 3 s for the head's entry to expire, plus at most the live waiter's next
    backoff step (1 s), not "at most 3 s". Real time; 1 s of slack for a loaded machine."""
    store = RedisLockStore(sync_redis)
    try:
        assert store.acquire(key, "holder", 10) is not None
        before = time.monotonic()
        assert store.acquire_or_queue(key, "crashed-head", 10)[0] is None  # queues, never tries again
        after = time.monotonic()
        assert store.release(key, "holder") is True  # announces the head's turn: nobody takes it
        pipeline = ResiliencePipelineBuilder().add_lock(key, ttl=10, wait=10, store=store).build()
        took = pipeline.execute(time.monotonic)
        assert took - before >= 2.9, "the crashed head's entry was not honoured for its 3 s"
        assert took - after <= 3.0 + 1.0 + 1.0, f"the live waiter got the lock {took - after:.2f}s later"
    finally:
        store.close()


def test_a_release_announces_only_the_heads_turn_and_only_when_someone_waits(
    deployment: Deployment, sync_redis: Any, key: str
) -> None:
    """Uncontended: no PUBLISH at all. Contended: one message naming the head."""
    store = RedisLockStore(sync_redis)
    channel = store.key(key)
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
        assert store.acquire(key, "alone", 10) is not None
        assert store.release(key, "alone") is True
        assert messages() == []
        assert store.acquire(key, "holder", 10) is not None
        assert store.acquire_or_queue(key, "first", 10)[0] is None
        assert store.acquire_or_queue(key, "second", 10)[0] is None
        assert store.release(key, "holder") is True
        assert messages() == [b"h:first"]
    finally:
        pubsub.close()
        subscriber.close()
        store.close()


def test_a_plain_wait_released_is_still_woken(sync_redis: Any, key: str) -> None:
    """A caller outside the queue watches the key, so the next release is announced to it too."""
    store = RedisLockStore(sync_redis)
    try:
        assert store.acquire(key, "holder", 10) is not None
        woke: list[bool] = []
        # Generous bounds for a loaded machine: woken by the release, the wait ends well before
        # its 10 s timeout (a missed notification would end it only then).
        thread = threading.Thread(target=lambda: woke.append(store.wait_released(key, 10)))
        started = time.monotonic()
        thread.start()
        time.sleep(0.1)
        assert store.release(key, "holder") is True
        thread.join(10)
        assert woke == [True]
        assert time.monotonic() - started < 5
    finally:
        store.close()


@pytest.mark.parametrize("hostile", ["a}b", "a{}b", "{tag}x", "x{"])
def test_keys_with_braces_stay_in_one_slot(sync_redis: Any, key: str, hostile: str) -> None:
    """Companion keys share the lock key's Cluster slot; a key that cannot have them is not queued."""
    store = RedisLockStore(sync_redis)
    name = key + hostile
    try:
        assert store.acquire(name, "holder", 10) is not None
        assert store.acquire_or_queue(name, "waiter", 10)[0] is None
        assert store.release(name, "holder") is True
        assert store.acquire_or_queue(name, "waiter", 10)[0] is not None
        assert (store.queue_keys(name) is None) == ("}" in hostile and "{tag}" not in hostile)
    finally:
        store.close()
