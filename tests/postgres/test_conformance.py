"""The generic store-conformance suite (tests/stores/conformance.py) over the PostgreSQL stores.

Both flavours (a conninfo gives the store a sync pool and an async pool per loop); the
database's clock decides expiry, so the harness sleeps in real time.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import pytest

from resilience.stores import PostgresLockStore, PostgresSemaphoreStore
from tests.stores.conformance import (  # noqa: F401 - fixtures and test classes are collected from here
    StoreHarness,
    TestLockStoreConformance,
    TestSemaphorePermitsConformance,
    TestSemaphoreStoreConformance,
    key,
    lock_store,
    semaphore_store,
)

if TYPE_CHECKING:
    from collections.abc import Callable

pytestmark = pytest.mark.postgres


def _factory(cls: type[Any], dsn: str, made: list[Any]) -> Callable[[], StoreHarness]:
    def make() -> StoreHarness:
        store = cls(dsn)
        made.append(store)
        return StoreHarness(store, advance=time.sleep, real_time=True)

    return make


@pytest.fixture
def lock_store_factory(postgres_dsn: str, made_stores: list[Any]) -> Callable[[], StoreHarness]:
    return _factory(PostgresLockStore, postgres_dsn, made_stores)


@pytest.fixture
def semaphore_store_factory(postgres_dsn: str, made_stores: list[Any]) -> Callable[[], StoreHarness]:
    return _factory(PostgresSemaphoreStore, postgres_dsn, made_stores)
