"""The shared-holds suite (tests/stores/shared_holds.py) over `PostgresLockStore`, both flavours.

The database's clock decides expiry, so the harness sleeps in real time; the queue length is
read from the store's queue table.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import psycopg
import pytest

from resilience.stores import PostgresLockStore
from tests.stores.shared_holds import (  # noqa: F401 - fixtures and test classes are collected from here
    SharedHarness,
    TestSharedHolds,
    rw,
    rw_key,
)

if TYPE_CHECKING:
    from collections.abc import Callable

pytestmark = pytest.mark.postgres


@pytest.fixture
def shared_store_factory(postgres_dsn: str, made_stores: list[Any]) -> Callable[[], SharedHarness]:
    def make() -> SharedHarness:
        store = PostgresLockStore(postgres_dsn)
        made_stores.append(store)
        conn = psycopg.connect(postgres_dsn, autocommit=True)

        def queued(key: str) -> int:
            row = conn.execute(
                "SELECT count(*) FROM resilience_locks_queue WHERE key = %s AND expires_at > clock_timestamp()", (key,)
            ).fetchone()
            assert row is not None
            return int(row[0])

        closers: list[Any] = [conn.close]
        return SharedHarness(store, time.sleep, queued, real_time=True, closers=closers)

    return make
