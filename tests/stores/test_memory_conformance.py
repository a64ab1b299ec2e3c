"""The conformance suite over the memory stores, on a fake clock (sync and async flavours)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from resilience.stores import MemoryLockStore, MemorySemaphoreStore
from resilience.testing import FakeTimeProvider
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


@pytest.fixture
def lock_store_factory() -> Callable[[], StoreHarness]:
    def make() -> StoreHarness:
        clock = FakeTimeProvider()
        return StoreHarness(MemoryLockStore(clock), clock.advance)

    return make


@pytest.fixture
def semaphore_store_factory() -> Callable[[], StoreHarness]:
    def make() -> StoreHarness:
        clock = FakeTimeProvider()
        return StoreHarness(MemorySemaphoreStore(clock), clock.advance)

    return make
