"""The PostgreSQL stores keep one pool connection between statements, and give it back.

One caller at a time runs its statements on a connection the store keeps out of the pool: no
checkout per statement. The pool still sees it: it is handed back at the first statement after
a second (and a fresh one checked out), at once when a statement fails, and when the store
closes; a second caller meanwhile uses the pool as before.
"""

from __future__ import annotations

import threading
import time
import uuid
from typing import Any

import psycopg
import psycopg_pool
import pytest

from resilience.stores import PostgresLockStore

pytestmark = pytest.mark.postgres


class CountingPool(psycopg_pool.ConnectionPool):
    """A pool that counts its checkouts."""

    checkouts = 0

    def getconn(self, timeout: float | None = None) -> Any:
        self.checkouts += 1
        return super().getconn(timeout)


def _pool(dsn: str, name: str, *, size: int = 2) -> CountingPool:
    pool = CountingPool(
        dsn, min_size=1, max_size=size, open=False, kwargs={"autocommit": True, "application_name": name}
    )
    pool.open(wait=True)
    return pool


def _in_use(pool: psycopg_pool.ConnectionPool | psycopg_pool.AsyncConnectionPool) -> int:
    stats = pool.get_stats()
    return int(stats["pool_size"]) - int(stats["pool_available"])


def test_one_caller_checks_out_about_one_connection_per_second(postgres_dsn: str, pg_key: str) -> None:
    pool = _pool(postgres_dsn, "kept-count")
    store = PostgresLockStore(pool)
    try:
        started = time.monotonic()
        for n in range(200):
            assert store.acquire(pg_key, f"owner-{n}", 30) is not None
            assert store.release(pg_key, f"owner-{n}")
        seconds = time.monotonic() - started
        # 400 statements; one checkout, plus one per second they took (the connection goes back).
        assert pool.checkouts <= 2 + seconds, f"{pool.checkouts} checkouts in {seconds:.2f}s"
        assert _in_use(pool) == 1  # kept between statements
        store.close()
        assert _in_use(pool) == 0  # handed back: a pool you passed gets all its connections back
    finally:
        store.close()
        pool.close()


def test_the_kept_connection_goes_back_after_a_second(postgres_dsn: str, pg_key: str) -> None:
    pool = _pool(postgres_dsn, "kept-age")
    store = PostgresLockStore(pool)
    try:
        assert store.acquire(pg_key, "a", 30) is not None
        checkouts = pool.checkouts
        time.sleep(1.1)
        assert store.release(pg_key, "a")
        assert pool.checkouts == checkouts + 1  # the old one went back, a fresh one came out
        assert _in_use(pool) == 1
    finally:
        store.close()
        pool.close()


def test_a_second_caller_meanwhile_uses_the_pool(postgres_dsn: str, pg_key: str) -> None:
    """Eight threads at once: each statement runs, on the kept connection or a pooled one."""
    pool = _pool(postgres_dsn, "kept-threads", size=4)
    store = PostgresLockStore(pool)
    errors: list[BaseException] = []

    def worker(index: int) -> None:
        try:
            for n in range(25):
                owner = f"{index}-{n}"
                if store.acquire(f"{pg_key}:{index}", owner, 30) is None:
                    errors.append(AssertionError(f"{owner} refused"))
                elif not store.release(f"{pg_key}:{index}", owner):
                    errors.append(AssertionError(f"{owner} not released"))
        except BaseException as exc:
            errors.append(exc)

    try:
        threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        assert errors == []
        assert pool.checkouts > 2  # the callers that found the kept connection busy used the pool
        store.close()
        assert _in_use(pool) == 0
    finally:
        store.close()
        pool.close()


def test_a_kept_connection_that_dies_fails_one_call_and_is_replaced(postgres_dsn: str, pg_key: str) -> None:
    name = f"kept-killed-{uuid.uuid4().hex[:8]}"
    pool = _pool(postgres_dsn, name)
    store = PostgresLockStore(pool)
    try:
        assert store.acquire(pg_key, "a", 30) is not None
        with psycopg.connect(postgres_dsn, autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s", (name,))
        with pytest.raises(psycopg.OperationalError):
            store.release(pg_key, "a")
        assert store.release(pg_key, "a")  # handed back at once: the next call gets a live connection
        assert store.acquire(pg_key, "b", 30) is not None
        assert store.release(pg_key, "b")
    finally:
        store.close()
        pool.close()


class CountingAsyncPool(psycopg_pool.AsyncConnectionPool):
    """An asyncio pool that counts its checkouts."""

    checkouts = 0

    async def getconn(self, timeout: float | None = None) -> Any:
        self.checkouts += 1
        return await super().getconn(timeout)


async def test_an_async_caller_keeps_one_connection_too(postgres_dsn: str, pg_key: str) -> None:
    pool = CountingAsyncPool(postgres_dsn, min_size=1, max_size=2, open=False, kwargs={"autocommit": True})
    await pool.open(wait=True)
    store = PostgresLockStore(async_pool=pool)
    try:
        started = time.monotonic()
        for n in range(100):
            assert await store.acquire_async(pg_key, f"owner-{n}", 30) is not None
            assert await store.release_async(pg_key, f"owner-{n}")
        seconds = time.monotonic() - started
        assert pool.checkouts <= 2 + seconds, f"{pool.checkouts} checkouts in {seconds:.2f}s"
        assert _in_use(pool) == 1
        await store.aclose()
        assert _in_use(pool) == 0
    finally:
        await store.aclose()
        await pool.close()
