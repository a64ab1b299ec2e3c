"""The shared-holds suite (tests/stores/shared_holds.py) over `MemoryLockStore`, and its own edges."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from resilience.stores import MemoryLockStore
from resilience.testing import FakeTimeProvider
from tests.stores.shared_holds import (  # noqa: F401 - fixtures and test classes are collected from here
    SharedHarness,
    TestSharedHolds,
    rw,
    rw_key,
)

if TYPE_CHECKING:
    from collections.abc import Callable


@pytest.fixture
def shared_store_factory() -> Callable[[], SharedHarness]:
    def make() -> SharedHarness:
        clock = FakeTimeProvider()
        store = MemoryLockStore(clock)
        return SharedHarness(store, clock.advance, lambda key: len(store._queues.get(key, {})))

    return make
