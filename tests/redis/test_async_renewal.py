"""An async Redis lease with redis-py's default client options renews cleanly on 3.11-3.13."""

from __future__ import annotations

import asyncio
import sys
import uuid
import warnings
from typing import TYPE_CHECKING

import pytest
import redis.asyncio

from resilience import ResiliencePipelineBuilder
from resilience.stores import RedisLockStore
from resilience.telemetry import TelemetryOptions
from tests.unit.lockkit import Events

if TYPE_CHECKING:
    from tests.redis_support import RedisServer

pytestmark = [pytest.mark.redis, pytest.mark.slow]


class CountingStore:
    """Counts the renewals a `RedisLockStore` answered."""

    def __init__(self, inner: RedisLockStore) -> None:
        self.inner = inner
        self.renewals = 0

    async def acquire_or_ttl_async(self, key: str, owner: str, ttl: float) -> tuple[int | None, float | None]:
        return await self.inner.acquire_or_ttl_async(key, owner, ttl)

    async def acquire_async(self, key: str, owner: str, ttl: float) -> int | None:
        return await self.inner.acquire_async(key, owner, ttl)

    async def renew_async(self, key: str, owner: str, ttl: float) -> bool:
        answer = await self.inner.renew_async(key, owner, ttl)
        self.renewals += 1
        return answer

    async def release_async(self, key: str, owner: str) -> bool:
        return await self.inner.release_async(key, owner)


@pytest.mark.timeout(60)
async def test_twenty_async_renewals_on_default_client_options(redis_server: RedisServer) -> None:
    client = redis.asyncio.Redis(port=redis_server.port)  # every option at its default
    store = CountingStore(RedisLockStore(async_client=client))
    events = Events()
    pipeline = (
        ResiliencePipelineBuilder(telemetry=TelemetryOptions(listeners=[events]))
        .add_lock(f"renew-{uuid.uuid4().hex}", ttl=1.5, store=store)
        .build()
    )

    async def body() -> None:
        # 20 renewals at ttl/3 = 0.5 s: a ttl with room for a loaded machine (at 0.6 s, one
        # renewal 0.4 s late on a machine at load 15 lost the lease); bounded in time.
        loop = asyncio.get_running_loop()
        end = loop.time() + 40
        while store.renewals < 20 and loop.time() < end:
            await asyncio.sleep(0.1)

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # "coroutine ... was never awaited" fails the test
            await pipeline.execute_async(body)
    finally:
        await store.inner.aclose()
        await client.aclose()
    failed = events.named("OnLockRenewalFailed")
    assert failed == [], f"Python {sys.version_info[:2]}: {[e.arguments for e in failed]}"
    assert events.named("OnLockLost") == []
    assert store.renewals >= 20
