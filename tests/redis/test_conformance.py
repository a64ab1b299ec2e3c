"""The generic store-conformance suite (tests/stores/conformance.py) over the Redis stores.

Runs on a standalone server and on the Cluster, with both flavours. The suite lives on the
lock branch; until it is merged this module skips.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from resilience.stores import RedisLockStore, RedisSemaphoreStore

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "stores"))
conformance = pytest.importorskip("conformance", reason="the store-conformance suite is not merged yet")

pytestmark = pytest.mark.redis

TestLockStoreConformance = conformance.TestLockStoreConformance
TestSemaphoreStoreConformance = conformance.TestSemaphoreStoreConformance
TestSemaphorePermitsConformance = conformance.TestSemaphorePermitsConformance
lock_store = conformance.lock_store
semaphore_store = conformance.semaphore_store
key = conformance.key


@pytest.fixture
async def made_stores() -> AsyncIterator[list[Any]]:
    """The stores a test made, closed after it."""
    stores: list[Any] = []
    yield stores
    for store in stores:
        await store.aclose()


def _factory(cls: type[Any], sync_redis: Any, async_redis: Any, made: list[Any]) -> Callable[[], Any]:
    def make() -> Any:
        store = cls(sync_redis, async_client=async_redis)
        made.append(store)
        return conformance.StoreHarness(store, advance=time.sleep, real_time=True)

    return make


@pytest.fixture
def lock_store_factory(sync_redis: Any, async_redis: Any, made_stores: list[Any]) -> Callable[[], Any]:
    return _factory(RedisLockStore, sync_redis, async_redis, made_stores)


@pytest.fixture
def semaphore_store_factory(sync_redis: Any, async_redis: Any, made_stores: list[Any]) -> Callable[[], Any]:
    return _factory(RedisSemaphoreStore, sync_redis, async_redis, made_stores)
