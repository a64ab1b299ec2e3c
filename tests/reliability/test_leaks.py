"""No growth in threads, tasks, connections or Redis keys over many lock + retry + timeout executions.

`LEAK_EXECUTIONS` (default 20,000 on the memory store, a tenth of it on Redis) scales the
runs; `make soak` runs the marked soak variant with a million. A leak of anything per execution
(a thread, a task, a connection, a key) shows within the first few hundred executions; the
count only has to outlast caches and pools, and the full suite runs on three interpreters.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import threading
import time
import uuid
import weakref
from typing import TYPE_CHECKING, Any

import pytest
import redis
import redis.asyncio

from resilience import LockLostError, ResiliencePipelineBuilder, get_lock_token
from resilience.stores import MemoryLockStore, RedisLockStore

if TYPE_CHECKING:
    from collections.abc import Callable

    from tests.redis_support import RedisServer

COUNT = int(os.environ.get("LEAK_EXECUTIONS", "20000"))
SOAK_COUNT = 1_000_000


def _pipeline(store: Any, key: str = "leak") -> Any:
    return (
        ResiliencePipelineBuilder()
        .add_retry(max_retries=2, delay=0)
        .add_timeout(10)
        .add_lock(key, ttl=10, wait=1, store=store)
        .build()
    )


def _settle_threads(baseline: int) -> int:
    for _ in range(100):
        if threading.active_count() <= baseline:
            break
        threading.Event().wait(0.05)
    return threading.active_count()


def _memory_sync(count: int) -> None:
    store = MemoryLockStore()
    pipeline = _pipeline(store)
    flaky = iter(range(count * 2))

    def work() -> int | None:
        if next(flaky) % 1000 == 0:  # a retried failure now and then
            raise RuntimeError("transient")
        return get_lock_token()

    pipeline.execute(work)  # warm up whatever is created once
    gc.collect()
    threads = threading.active_count()
    for _ in range(count):
        assert pipeline.execute(work) is not None
    gc.collect()
    assert _settle_threads(threads) <= threads
    assert len(store) == 0


async def _memory_async(count: int) -> None:
    store = MemoryLockStore()
    pipeline = _pipeline(store)

    async def work() -> int | None:
        return get_lock_token()

    await pipeline.execute_async(work)
    gc.collect()
    threads, tasks = threading.active_count(), len(asyncio.all_tasks())
    for _ in range(count):
        assert await pipeline.execute_async(work) is not None
    await asyncio.sleep(0)
    gc.collect()
    assert _settle_threads(threads) <= threads
    for _ in range(100):  # a task of the last execution may still be ending on a loaded machine
        if len(asyncio.all_tasks()) <= tasks:
            break
        await asyncio.sleep(0.05)
    assert len(asyncio.all_tasks()) <= tasks
    assert len(store) == 0


@pytest.mark.timeout(180)
def test_no_growth_over_many_sync_executions_in_memory() -> None:
    _memory_sync(COUNT)


@pytest.mark.timeout(180)
async def test_no_growth_over_many_async_executions_in_memory() -> None:
    await _memory_async(COUNT)


def test_closed_event_loops_are_freed_after_async_leases() -> None:
    """A loop that held async leases is freed once closed: the runtime refers to loops weakly.

    Before, each loop's scheduler (the value of a registry weakly keyed by the loop) and the
    ended leases left in its heap held the loop strongly: no loop that ever held a lease was
    freed, one per `asyncio.run` in a process that runs async jobs that way.
    """
    store = MemoryLockStore()
    pipeline = ResiliencePipelineBuilder().add_lock(f"loops-{uuid.uuid4().hex}", ttl=5, store=store).build()
    loops: list[weakref.ref[asyncio.AbstractEventLoop]] = []

    async def body() -> int:
        return 1

    async def run() -> None:
        loops.append(weakref.ref(asyncio.get_running_loop()))
        for _ in range(3):
            await pipeline.execute_async(body)

    for _ in range(5):
        asyncio.run(run())
    gc.collect()
    assert sum(ref() is not None for ref in loops) == 0


class _SlowCloseLoop(asyncio.SelectorEventLoop):
    def close(self) -> None:
        # A loaded machine pauses the thread between the loop's last run and its close: the
        # lost lease's heap entry (its deadline, 0.3 s) fires meanwhile, its hop queued here.
        time.sleep(0.5)
        super().close()


@pytest.mark.parametrize(
    "loop_factory",
    [None, _SlowCloseLoop],
    ids=["closed-at-once", "closed-after-the-scheduler-fired"],
)
def test_a_closed_loop_whose_lease_was_lost_is_freed_soon(
    monkeypatch: pytest.MonkeyPatch, loop_factory: Callable[[], asyncio.AbstractEventLoop] | None
) -> None:
    """A lost lease left in the heap can reach its loop (the loss error's traceback): the
    scheduler forgets a closed loop's leases at its next firing, within a renewal interval,
    also when `close` dropped the hop it queued while the loop was stopped."""
    # The loss is logged with its error, and pytest keeps a test's log records (and so the
    # traceback's frames, the task, the loop) until the test ends: log nothing here.
    monkeypatch.setattr(logging.getLogger("resilience"), "disabled", True)
    store = MemoryLockStore()
    pipeline = (
        ResiliencePipelineBuilder()
        .add_lock(f"lost-{uuid.uuid4().hex}", ttl=0.3, store=store, cancel_on_lost=True)
        .build()
    )
    loops: list[weakref.ref[asyncio.AbstractEventLoop]] = []

    async def body() -> None:
        store._leases.clear()  # the lease vanishes from the store: the next renewal loses it
        await asyncio.sleep(2)

    async def run() -> None:
        loops.append(weakref.ref(asyncio.get_running_loop()))
        with pytest.raises(LockLostError):
            await pipeline.execute_async(body)

    for _ in range(2):
        with asyncio.Runner(loop_factory=loop_factory) as runner:
            runner.run(run())
    deadline = time.monotonic() + 10  # a renewal interval is 0.1 s; a loaded machine starves the timer thread
    while any(ref() is not None for ref in loops) and time.monotonic() < deadline:
        time.sleep(0.05)
        gc.collect()
    assert sum(ref() is not None for ref in loops) == 0


def _clients(server: RedisServer) -> int:
    return sum(1 for line in server.command("CLIENT", "LIST").splitlines() if "addr=" in line)


def _keys_without_ttl(client: Any, prefix: str) -> list[bytes]:
    return [key for key in client.scan_iter(match=f"{prefix}:*", count=1000) if client.pttl(key) < 0]


@pytest.mark.redis
@pytest.mark.timeout(180)
async def test_no_growth_over_many_executions_on_redis(redis_server: RedisServer) -> None:
    count = max(200, COUNT // 10)
    prefix = f"leak-{uuid.uuid4().hex}"
    client = redis.Redis(port=redis_server.port)
    async_client = redis.asyncio.Redis(port=redis_server.port)
    store = RedisLockStore(client, async_client=async_client, prefix=prefix)
    try:
        keys = [f"k{i}" for i in range(4)]
        pipelines = [_pipeline(store, key) for key in keys]

        async def work() -> int | None:
            return get_lock_token()

        for pipeline in pipelines:  # warm up: connections, scripts
            pipeline.execute(get_lock_token)
            await pipeline.execute_async(work)
        threads, tasks, connections = threading.active_count(), len(asyncio.all_tasks()), _clients(redis_server)
        pools = len(client.connection_pool._available_connections) + len(client.connection_pool._in_use_connections)
        for i in range(count):
            pipeline = pipelines[i % len(pipelines)]
            assert pipeline.execute(get_lock_token) is not None
            assert await pipeline.execute_async(work) is not None
        assert _settle_threads(threads) <= threads
        assert len(asyncio.all_tasks()) <= tasks
        assert _clients(redis_server) <= connections
        assert (
            len(client.connection_pool._available_connections) + len(client.connection_pool._in_use_connections)
            <= pools
        )
        assert _keys_without_ttl(client, prefix) == []
        # Only tombstones are left (no owner), each expiring.
        left = list(client.scan_iter(match=f"{prefix}:*"))
        assert len(left) <= len(keys)
        assert not any(client.hexists(key, "owner") for key in left)
    finally:
        await store.aclose()
        await async_client.aclose()
        client.close()


@pytest.mark.soak
@pytest.mark.timeout(1800)
async def test_soak_no_growth_over_a_million_executions() -> None:
    _memory_sync(SOAK_COUNT)
    await _memory_async(SOAK_COUNT)
