"""Cancelling an asyncio execution at every await point of acquire, renew and release.

A `GatedStore` suspends the chosen store call (before it is sent, or after its reply came back,
i.e. the server acted but the caller never learnt it); the execution's task is cancelled there.
Then: the lease is free within ttl (+ slack), and nothing the cancelled execution still does
releases or renews the lease a second owner took meanwhile.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import TYPE_CHECKING

import pytest
import redis
import redis.asyncio

from resilience import ResiliencePipelineBuilder
from resilience.stores import RedisLockStore
from tests.reliability.gated import GatedStore

if TYPE_CHECKING:
    from tests.redis_support import RedisServer

pytestmark = pytest.mark.redis

TTL = 1.0
SLACK = 1.5
POINTS = [f"{method}:{phase}" for method in ("acquire", "renew", "release") for phase in ("before", "after")]


@pytest.mark.parametrize("point", POINTS)
@pytest.mark.timeout(60)
async def test_cancellation_never_leaves_a_lease_past_ttl_nor_frees_another(
    redis_server: RedisServer, uid: str, point: str
) -> None:
    key = f"{uid}-{point}"
    async_client = redis.asyncio.Redis(port=redis_server.port)
    sync_client = redis.Redis(port=redis_server.port)
    inner = RedisLockStore(async_client=async_client)
    checker = RedisLockStore(sync_client)
    gated = GatedStore(inner, point)
    pipeline = ResiliencePipelineBuilder().add_lock(key, ttl=TTL, store=gated).build()

    async def body() -> None:
        # Long enough for a renewal (every ttl/3) when renew is the point; short otherwise.
        await asyncio.sleep(10 if point.startswith("renew") else 0.05)

    task = asyncio.create_task(pipeline.execute_async(body))
    try:
        await asyncio.wait_for(gated.reached.wait(), timeout=10)
        task.cancel()
        cancelled = time.monotonic()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await asyncio.wait_for(task, timeout=10)
        assert task.done()

        # The key frees within ttl of the cancellation (at once when a release got through).
        token = None
        while token is None and time.monotonic() - cancelled < TTL + SLACK:
            token = await asyncio.to_thread(checker.acquire, key, "second", 30)
            if token is None:
                await asyncio.sleep(0.05)
        assert token is not None, f"{point}: the lease outlived its ttl"

        # Let the suspended call go on, and give any straggler time to act.
        gated.opened.set()
        await asyncio.sleep(TTL)
        assert await asyncio.to_thread(checker.renew, key, "second", 30), f"{point}: the second owner's lease was taken"
        owners = {owner for _, _, owner in gated.calls}
        assert "second" not in owners
        assert len(owners) == 1  # every call of the execution used its own owner id
        assert await asyncio.to_thread(checker.release, key, "second")
    finally:
        gated.opened.set()
        if not task.done():
            task.cancel()
            with contextlib.suppress(BaseException):
                await task
        await inner.aclose()
        checker.close()
        await async_client.aclose()
        sync_client.close()
