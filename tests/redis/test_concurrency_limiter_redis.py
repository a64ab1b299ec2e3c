"""The concurrency limiter over RedisSemaphoreStore, on a real server and a real Cluster."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from resilience import RateLimiterRejectedError, ResiliencePipelineBuilder, get_lock_token
from resilience.stores import RedisSemaphoreStore

pytestmark = pytest.mark.redis


def test_permits_are_leases_shared_through_redis(sync_redis: Any, key: str) -> None:
    """Two pipelines (as two processes would) share a limit of 2; each holder has its own fencing token."""
    store = RedisSemaphoreStore(sync_redis)
    first = ResiliencePipelineBuilder().add_concurrency_limiter(2, key=key, store=store, ttl=5).build()
    second = ResiliencePipelineBuilder().add_concurrency_limiter(2, key=key, store=store, ttl=5).build()
    inside = threading.Barrier(3)
    leave = threading.Event()
    tokens: list[int | None] = []

    def hold() -> None:
        tokens.append(get_lock_token())
        inside.wait(10)
        leave.wait(10)

    threads = [threading.Thread(target=p.execute, args=(hold,)) for p in (first, second)]
    for thread in threads:
        thread.start()
    inside.wait(10)
    with pytest.raises(RateLimiterRejectedError) as caught:
        second.execute(lambda: None)
    assert caught.value.key == key
    assert caught.value.retry_after is not None
    assert 0 < caught.value.retry_after <= 5
    leave.set()
    for thread in threads:
        thread.join(10)
    assert len({t for t in tokens if t}) == 2
    assert first.execute(lambda: "free again") == "free again"
    store.close()


async def test_async_waiter_gets_the_released_permit(async_redis: Any, key: str) -> None:
    """An async caller with `wait` is let in when the holder releases (woken by the store)."""
    store = RedisSemaphoreStore(async_client=async_redis)
    pipeline = ResiliencePipelineBuilder().add_concurrency_limiter(1, key=key, store=store, ttl=5, wait=10).build()
    gate = asyncio.Event()
    holding = asyncio.Event()
    order: list[str] = []

    async def hold() -> None:
        holding.set()
        await gate.wait()
        order.append("holder")

    async def after() -> None:
        order.append("waiter")

    holder = asyncio.ensure_future(pipeline.execute_async(hold))
    await asyncio.wait_for(holding.wait(), 10)
    waiter = asyncio.ensure_future(pipeline.execute_async(after))
    await asyncio.sleep(0.1)
    assert order == []
    gate.set()
    await asyncio.wait_for(asyncio.gather(holder, waiter), 15)
    assert order == ["holder", "waiter"]
    await store.aclose()
