"""What the PostgreSQL stores add to the conformance suite: arguments, pools, schema, tokens, notification."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from typing import TYPE_CHECKING, Any

import psycopg
import psycopg_pool
import pytest

from resilience import ValidationError
from resilience.stores import (
    AsyncLockStore,
    LockStore,
    PostgresLockStore,
    PostgresSemaphoreStore,
    SupportsLeaseInfo,
    SupportsReleaseNotification,
    serves,
)
from resilience.stores._postgres_notify import digest

if TYPE_CHECKING:
    from collections.abc import Generator

pytestmark = pytest.mark.postgres


def _table() -> str:
    return f"t_{uuid.uuid4().hex[:12]}"


# -- arguments --------------------------------------------------------------------------------


@pytest.mark.parametrize("table", ["", "Locks", "locks; drop table x", "a.b.c", "1abc", "x" * 60, 7])
def test_a_bad_table_name_is_refused(table: Any) -> None:
    """Only lower-case SQL names (optionally schema-qualified) become part of the SQL."""
    with pytest.raises(ValidationError, match="table must be a lower-case SQL name"):
        PostgresLockStore("postgresql://nowhere", table=table)


def test_the_first_argument_must_be_a_conninfo_or_a_pool() -> None:
    """Anything else, or nothing at all, is a ValidationError naming what to pass."""
    with pytest.raises(ValidationError, match=r"conninfo string or a psycopg_pool\.ConnectionPool"):
        PostgresLockStore(42)
    with pytest.raises(ValidationError, match="and/or"):
        PostgresLockStore()
    with pytest.raises(ValidationError, match="AsyncConnectionPool"):
        PostgresSemaphoreStore("postgresql://nowhere", async_pool="nope")


async def test_two_async_pools_are_refused(postgres_dsn: str) -> None:
    """An async pool first and another as async_pool= is ambiguous."""
    first = psycopg_pool.AsyncConnectionPool(postgres_dsn, open=False)
    second = psycopg_pool.AsyncConnectionPool(postgres_dsn, open=False)
    with pytest.raises(ValidationError, match="two async pools"):
        PostgresLockStore(first, async_pool=second)


@pytest.mark.parametrize("ttl", [0, -1, float("nan"), float("inf"), 1e9 + 1, True, "1"])
def test_a_bad_ttl_is_refused_before_any_round_trip(pg_locks: PostgresLockStore, pg_key: str, ttl: Any) -> None:
    with pytest.raises(ValidationError, match="ttl"):
        pg_locks.acquire(pg_key, "a", ttl)


def test_keys_and_owners_must_be_text_without_nul(pg_locks: PostgresLockStore, pg_key: str) -> None:
    with pytest.raises(ValidationError, match="NUL"):
        pg_locks.acquire(pg_key + "\x00", "a", 1)
    with pytest.raises(ValidationError, match="owner: must be a str"):
        pg_locks.release(pg_key, b"a")  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match="key: must be a str"):
        pg_locks.wait_released(None, 1)  # type: ignore[arg-type]


@pytest.mark.parametrize("limit", [0, -1, True, 1.5, 2**31])
def test_a_bad_limit_is_refused(pg_semaphores: PostgresSemaphoreStore, pg_key: str, limit: Any) -> None:
    with pytest.raises(ValidationError, match="limit"):
        pg_semaphores.acquire(pg_key, "a", 1, limit)


def test_the_longest_ttl_is_accepted(pg_locks: PostgresLockStore, pg_key: str) -> None:
    """1e9 s (about 31.7 years) is still a valid expiry on the database's clock."""
    assert pg_locks.acquire(pg_key, "a", 1e9) is not None
    assert pg_locks.release(pg_key, "a")


def test_ttls_are_rounded_up_to_whole_milliseconds(pg_locks: PostgresLockStore, pg_key: str) -> None:
    """0.0001 s becomes 1 ms: the lease exists, then is gone almost at once."""
    assert pg_locks.acquire(pg_key, "a", 0.0001) is not None
    time.sleep(0.01)
    assert pg_locks.acquire(pg_key, "b", 10) is not None


# -- pools and flavours -----------------------------------------------------------------------


def test_a_sync_pool_of_yours_serves_the_sync_methods_only(postgres_dsn: str, pg_key: str) -> None:
    """A ConnectionPool (not in autocommit: the pool commits) enables the sync flavour; async calls say what to pass."""
    with psycopg_pool.ConnectionPool(postgres_dsn, min_size=1, max_size=2, open=True) as pool:
        store = PostgresLockStore(pool)
        assert store.has_sync_client
        assert not store.has_async_client
        assert serves(store, LockStore)
        assert serves(store, SupportsLeaseInfo)
        assert serves(store, SupportsReleaseNotification)
        token = store.acquire(pg_key, "a", 10)
        assert token is not None
        assert store.acquire(pg_key, "b", 10) is None
        assert store.release(pg_key, "a")
        assert store.wait_released(
            pg_key, 30
        )  # free: True once the listener is up (its connect is slow on a loaded machine)
        with pytest.raises(ValidationError, match="needs an async pool"):
            asyncio.run(store.acquire_async(pg_key, "a", 10))
        store.close()
        assert not pool.closed  # yours stays open


async def test_an_async_pool_of_yours_serves_the_async_methods_only(postgres_dsn: str, pg_key: str) -> None:
    async with psycopg_pool.AsyncConnectionPool(postgres_dsn, min_size=1, max_size=2, open=False) as pool:
        for store in (PostgresLockStore(pool), PostgresLockStore(None, async_pool=pool)):
            assert store.has_async_client
            assert not store.has_sync_client
            assert serves(store, AsyncLockStore)
            assert repr(store) == "PostgresLockStore(table='resilience_locks', flavours=async)"
            token = await store.acquire_async(pg_key, "a", 10)
            assert token is not None
            assert await store.acquire_or_ttl_async(pg_key, "b", 10) == (None, pytest.approx(10, abs=1))
            assert await store.renew_async(pg_key, "a", 10)
            assert await store.release_async(pg_key, "a")
            assert await store.wait_released_async(pg_key, 30)  # free: True once the listener is up
            with pytest.raises(ValidationError, match="needs a sync pool"):
                store.acquire(pg_key, "a", 10)
            await store.aclose()
        assert not pool.closed


def test_a_conninfo_gives_both_flavours(postgres_dsn: str) -> None:
    with PostgresSemaphoreStore(postgres_dsn) as store:
        assert store.has_sync_client
        assert store.has_async_client
        assert repr(store) == "PostgresSemaphoreStore(table='resilience_semaphores', flavours=sync+async)"


# -- schema -----------------------------------------------------------------------------------


@pytest.mark.parametrize("cls", [PostgresLockStore, PostgresSemaphoreStore])
def test_create_schema_is_idempotent_and_safe_concurrently(postgres_dsn: str, cls: Any) -> None:
    """Eight threads create the same new table at once; all succeed and the store works."""
    table = _table()
    stores = [cls(postgres_dsn, table=table) for _ in range(8)]
    errors: list[BaseException] = []

    def create(store: Any) -> None:
        try:
            store.create_schema()
            store.create_schema()
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=create, args=(store,)) for store in stores]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert errors == []
    args = (1,) if cls is PostgresSemaphoreStore else ()
    assert stores[0].acquire("k", "a", 10, *args) is not None
    for store in stores:
        store.close()


async def test_create_schema_async_in_a_schema_of_yours(postgres_dsn: str) -> None:
    """A schema-qualified table works (its sequence and functions live beside it)."""
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute("CREATE SCHEMA IF NOT EXISTS app")
    store = PostgresSemaphoreStore(postgres_dsn, table=f"app.{_table()}")
    await store.create_schema_async()
    await store.create_schema_async()
    assert await store.acquire_async("k", "a", 10, 1) is not None
    assert await store.acquire_or_ttl_async("k", "b", 10, 1) == (None, pytest.approx(10, abs=1))
    waiting = asyncio.ensure_future(store.wait_released_async("k", 20))
    await asyncio.sleep(0.3)
    assert not waiting.done()
    assert await store.release_async("k", "a")
    assert await asyncio.wait_for(waiting, 10) is True  # the channel "app.t_..." is listened to, quoted
    await store.aclose()


def test_the_sequence_is_forced_to_cache_1(postgres_dsn: str) -> None:
    """A sequence someone altered to CACHE 20 is set back: cached values would break the order."""
    store = PostgresLockStore(postgres_dsn, table=_table())
    store.create_schema()
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute(f"ALTER SEQUENCE {store.table}_token CACHE 20")
        store.create_schema()
        row = conn.execute("SELECT seqcache FROM pg_sequence WHERE seqrelid = %s::regclass", (f"{store.table}_token",))
        assert row.fetchone() == (1,)
    store.close()


def test_a_missing_table_is_a_store_error(postgres_dsn: str) -> None:
    """Without create_schema, the database's error propagates, its type unchanged, with the fix as a note."""
    with (
        PostgresLockStore(postgres_dsn, table=_table()) as store,
        pytest.raises(psycopg.errors.UndefinedFunction) as caught,  # the lock's acquire is a function too
    ):
        store.acquire("k", "a", 1)
    assert any("call store.create_schema()" in note for note in caught.value.__notes__)


async def test_a_missing_table_is_explained_in_async_calls_too(postgres_dsn: str) -> None:
    store = PostgresSemaphoreStore(postgres_dsn, table=_table())
    try:
        with pytest.raises(psycopg.errors.UndefinedFunction) as caught:  # the semaphore's SQL is a function
            await store.acquire_async("k", "a", 1, 2)
        (note,) = caught.value.__notes__
        assert note.startswith(f"PostgresSemaphoreStore: the table {store.table!r} (or its functions) does not exist")
        assert "call store.create_schema()" in note
    finally:
        await store.aclose()


def _unreachable() -> str:
    from tests.redis_support import free_port

    return f"postgresql://postgres@127.0.0.1:{free_port()}/postgres"


def test_a_bad_dsn_says_the_connection_was_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """The pool's timeout keeps its type; its note and cause say why it never connected.

    One direct connection attempt finds the cause; the next timeouts reuse it (an outage is
    no connection storm).
    """
    attempts: list[str] = []
    connect = psycopg.connect

    def counted(conninfo: str, **kwargs: Any) -> Any:
        attempts.append(conninfo)
        return connect(conninfo, **kwargs)

    monkeypatch.setattr(psycopg, "connect", counted)
    store = PostgresLockStore(_unreachable())
    store._sync_pool("test").timeout = 0.5  # type: ignore[attr-defined]
    try:
        for call in (lambda: store.acquire("k", "a", 1), store.create_schema):
            with pytest.raises(psycopg_pool.PoolTimeout) as caught:
                call()
            assert isinstance(caught.value.__cause__, psycopg.OperationalError)
            assert "refused" in str(caught.value.__cause__)
            (note,) = caught.value.__notes__
            assert note.startswith("PostgresLockStore: the pool could not connect to PostgreSQL: ")
            assert "refused" in note
        assert len(attempts) == 1
    finally:
        store.close()


async def test_a_bad_dsn_says_the_connection_was_refused_in_async_calls() -> None:
    store = PostgresLockStore(_unreachable())
    (await store._get_async_pool("test")).timeout = 0.5
    try:
        for call in (lambda: store.acquire_async("k", "a", 1), store.create_schema_async):
            with pytest.raises(psycopg_pool.PoolTimeout) as caught:
                await call()
            assert "refused" in str(caught.value.__cause__)
            assert "refused" in caught.value.__notes__[0]
    finally:
        await store.aclose()


# -- tokens and exclusion under concurrency ----------------------------------------------------


def test_tokens_only_increase_per_key_under_contention(pg_locks: PostgresLockStore, pg_key: str) -> None:
    """Eight threads race acquire/release on one key: grants never overlap and tokens rise."""
    granted: list[int] = []
    inside = 0
    overlaps = 0
    guard = threading.Lock()

    def worker(owner: str) -> None:
        nonlocal inside, overlaps
        for _ in range(30):
            token = pg_locks.acquire(pg_key, owner, 5)
            if token is None:
                continue
            with guard:
                inside += 1
                overlaps += inside > 1
                granted.append(token)
                inside -= 1
            assert pg_locks.release(pg_key, owner)

    threads = [threading.Thread(target=worker, args=(f"o{i}",)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert overlaps == 0
    assert granted
    assert granted == sorted(set(granted))


def test_the_semaphore_never_admits_more_than_limit(pg_semaphores: PostgresSemaphoreStore, pg_key: str) -> None:
    """Twelve threads race for three slots: at most three holders at any moment."""
    holders: set[str] = set()
    most = 0
    guard = threading.Lock()

    def worker(owner: str) -> None:
        nonlocal most
        for _ in range(15):
            if pg_semaphores.acquire(pg_key, owner, 5, 3) is None:
                continue
            with guard:
                holders.add(owner)
                most = max(most, len(holders))
            time.sleep(0.001)
            with guard:
                holders.discard(owner)
            assert pg_semaphores.release(pg_key, owner)

    threads = [threading.Thread(target=worker, args=(f"o{i}",)) for i in range(12)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert 1 <= most <= 3


def test_ended_rows_are_purged_now_and_then(pg_locks: PostgresLockStore, pg_key: str) -> None:
    """A release at most once a minute deletes rows whose lease ended over a minute ago."""
    with pg_locks._sync_pool("test").connection() as conn:
        conn.execute(
            f"INSERT INTO {pg_locks.table} (key, owner, token, expires_at)"
            " VALUES (%s, NULL, 1, clock_timestamp() - interval '2 minutes')",
            (pg_key + ":old",),
        )
    assert pg_locks.acquire(pg_key, "a", 10) is not None
    assert pg_locks.release(pg_key, "a")  # not due yet: nothing purged
    assert _row_count(pg_locks, pg_key + ":old") == 1
    pg_locks._purged_at -= 120
    assert pg_locks.acquire(pg_key, "a", 10) is not None
    assert pg_locks.release(pg_key, "a")
    assert _row_count(pg_locks, pg_key + ":old") == 0
    assert _row_count(pg_locks, pg_key) == 1  # the fresh tombstone stays


async def test_semaphore_rows_are_purged_too(pg_semaphores: PostgresSemaphoreStore, pg_key: str) -> None:
    with pg_semaphores._sync_pool("test").connection() as conn:
        conn.execute(
            f"INSERT INTO {pg_semaphores.table} (key, owner, token, expires_at)"
            " VALUES (%s, 'gone', 1, clock_timestamp() - interval '2 minutes')",
            (pg_key + ":old",),
        )
        conn.execute(  # a waiter that crashed long ago
            f"INSERT INTO {pg_semaphores.table}_queue (key, owner, permits, expires_at)"
            " VALUES (%s, 'gone', 2, clock_timestamp() - interval '2 minutes')",
            (pg_key + ":old",),
        )
    pg_semaphores._purged_at -= 120
    assert await pg_semaphores.acquire_async(pg_key, "a", 10, 1) is not None
    assert await pg_semaphores.release_async(pg_key, "a")
    assert _row_count(pg_semaphores, pg_key + ":old") == 0
    with pg_semaphores._sync_pool("test").connection() as conn:
        queued = conn.execute(f"SELECT count(*) FROM {pg_semaphores.table}_queue WHERE key = %s", (pg_key + ":old",))
        assert queued.fetchone() == (0,)
    pg_semaphores._purged_at -= 120
    assert pg_semaphores.acquire(pg_key, "a", 10, 1) is not None
    assert pg_semaphores.release(pg_key, "a")


async def test_lock_rows_are_purged_from_async_releases(pg_locks: PostgresLockStore, pg_key: str) -> None:
    pg_locks._purged_at -= 120
    assert await pg_locks.acquire_async(pg_key, "a", 10) is not None
    assert await pg_locks.release_async(pg_key, "a")
    assert pg_locks._purged_at > time.monotonic() - 5


def _row_count(store: Any, key: str) -> int:
    with store._sync_pool("test").connection() as conn:
        row = conn.execute(f"SELECT count(*) FROM {store.table} WHERE key = %s", (key,)).fetchone()
        assert row is not None
        return int(row[0])


# -- release notification ---------------------------------------------------------------------


def test_the_notification_payload_is_the_keys_md5(pg_locks: PostgresLockStore) -> None:
    with pg_locks._sync_pool("test").connection() as conn:
        row = conn.execute("SELECT md5(%s)", ("clé:€",)).fetchone()
    assert row == (digest("clé:€"),)


def _terminate_listeners(dsn: str, channel_table: str) -> int:
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE query = %s", (f'LISTEN "{channel_table}"',)
        ).fetchall()
    return len(rows)


def test_a_broken_listener_wakes_its_waiters_and_comes_back(postgres_dsn: str, pg_key: str) -> None:
    """Terminating the LISTEN connection wakes the waiter (a hint); the next wait listens again."""
    store = PostgresLockStore(postgres_dsn, table="resilience_locks")
    assert store.acquire(pg_key, "a", 30) is not None
    woken: list[bool] = []
    waiter = threading.Thread(target=lambda: woken.append(store.wait_released(pg_key, 20)))
    waiter.start()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not (store._listener and store._listener._listening):
        time.sleep(0.01)
    time.sleep(0.1)
    started = time.monotonic()
    assert _terminate_listeners(postgres_dsn, store.table) >= 1
    waiter.join(10)
    assert woken == [True]
    assert time.monotonic() - started < 5
    # The next wait connects again and is woken by a real release.
    again: list[bool] = []
    waiter = threading.Thread(target=lambda: again.append(store.wait_released(pg_key, 20)))
    time.sleep(1.1)  # past the listener's retry pause
    waiter.start()
    time.sleep(0.3)
    assert store.release(pg_key, "a")
    waiter.join(10)
    assert again == [True]
    store.close()


async def test_a_broken_async_listener_wakes_its_waiters(postgres_dsn: str, pg_key: str) -> None:
    store = PostgresLockStore(postgres_dsn)
    assert await store.acquire_async(pg_key, "a", 30) is not None
    waiting = asyncio.ensure_future(store.wait_released_async(pg_key, 20))
    await asyncio.sleep(0.3)
    assert await asyncio.to_thread(_terminate_listeners, postgres_dsn, store.table) >= 1
    assert await asyncio.wait_for(waiting, 10) is True
    await store.aclose()


def test_without_a_server_a_wait_is_a_poll_interval(pg_key: str) -> None:
    """Nothing answers: the wait neither raises nor spins; it sleeps out its timeout (False)."""
    from tests.redis_support import free_port

    store = PostgresLockStore(f"postgresql://postgres@127.0.0.1:{free_port()}/postgres?connect_timeout=1")
    store._sync_pool("test").timeout = 0.5  # type: ignore[attr-defined]
    started = time.monotonic()
    assert store.wait_released(pg_key, 0.3) is False
    assert time.monotonic() - started >= 0.3
    assert store.wait_released(pg_key, 0.2) is False  # within the retry pause: no new listener
    store.close()


async def test_without_a_server_an_async_wait_is_a_poll_interval(pg_key: str) -> None:
    from tests.redis_support import free_port

    store = PostgresLockStore(f"postgresql://postgres@127.0.0.1:{free_port()}/postgres?connect_timeout=1")
    (await store._get_async_pool("test")).timeout = 0.5
    assert await store.wait_released_async(pg_key, 0.3) is False
    assert await store.wait_released_async(pg_key, 0.2) is False
    await store.aclose()


def _registered(listener: Any, count: int) -> bool:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if listener is not None and sum(len(events) for events in listener._waiters.values()) >= count:
            return True
        time.sleep(0.01)
    return False


def test_a_release_wakes_the_longest_waiting_waiter_only(
    pg_locks: PostgresLockStore, pg_key: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """FIFO within a store: three waiters, three releases, woken in the order they came."""
    from resilience.stores import _postgres_notify

    checked: set[threading.Thread] = set()
    check = _postgres_notify.checked

    def recorded(is_free: Any) -> Generator[Any, Any, bool]:
        free = yield from check(is_free)
        checked.add(threading.current_thread())
        return free

    monkeypatch.setattr(_postgres_notify, "checked", recorded)
    assert pg_locks.acquire(pg_key, "holder", 30) is not None
    woken: list[str] = []
    threads = []
    for index, name in enumerate("abc"):
        thread = threading.Thread(target=lambda name=name: pg_locks.wait_released(pg_key, 20) and woken.append(name))
        thread.start()
        threads.append(thread)
        pg_locks.wait_released(pg_key + ":warm", 0.01)  # makes the listener exist
        assert _registered(pg_locks._listener, index + 1)
    # A waiter registers, then checks once whether the key is already free: every one must
    # have passed that check, or a release meanwhile lets it return by its check, not by a
    # wake-up (on a loaded machine a thread can be late for it by far more than 0.3 s).
    deadline = time.monotonic() + 10
    while not checked.issuperset(threads) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert checked.issuperset(threads)
    for expected in (["a"], ["a", "b"], ["a", "b", "c"]):
        assert pg_locks.release(pg_key, "holder")
        deadline = time.monotonic() + 10
        while len(woken) < len(expected) and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.1)  # a herd would show up here
        assert woken == expected
        assert pg_locks.acquire(pg_key, "holder", 30) is not None
    for thread in threads:
        thread.join(10)


async def test_an_async_release_wakes_the_longest_waiting_task_only(
    pg_locks: PostgresLockStore, pg_key: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from resilience.stores import _postgres_notify

    checked: set[asyncio.Task[Any] | None] = set()
    check = _postgres_notify.checked

    def recorded(is_free: Any) -> Generator[Any, Any, bool]:
        free = yield from check(is_free)
        checked.add(asyncio.current_task())
        return free

    async def passed(task: asyncio.Future[Any]) -> None:
        """Until `task` has checked once whether the key is free (a loaded machine is slow to)."""
        for _ in range(1000):
            if task in checked:
                return
            await asyncio.sleep(0.01)
        pytest.fail("the waiter never checked the key")

    monkeypatch.setattr(_postgres_notify, "checked", recorded)
    assert await pg_locks.acquire_async(pg_key, "holder", 30) is not None
    first = asyncio.ensure_future(pg_locks.wait_released_async(pg_key, 20))
    await passed(first)
    second = asyncio.ensure_future(pg_locks.wait_released_async(pg_key, 20))
    await passed(second)
    assert await pg_locks.release_async(pg_key, "holder")
    assert await asyncio.wait_for(first, 10) is True
    await asyncio.sleep(0.2)
    assert not second.done()
    assert await pg_locks.acquire_async(pg_key, "holder", 30) is not None
    assert await pg_locks.release_async(pg_key, "holder")
    assert await asyncio.wait_for(second, 10) is True


def test_create_schema_upgrades_a_semaphore_table_of_the_previous_version(postgres_dsn: str, pg_key: str) -> None:
    """A table without `permits` and a four-argument acquire function: `create_schema()` brings both up to date."""
    table = f"old_semaphores_{pg_key[-8:]}"
    store = PostgresSemaphoreStore(postgres_dsn, table=table)
    try:
        with store._sync_pool("test").connection() as conn:
            conn.execute(
                f"CREATE TABLE {table} (key text NOT NULL, owner text NOT NULL, token bigint NOT NULL,"
                " expires_at timestamptz NOT NULL, PRIMARY KEY (key, owner))"
            )
            conn.execute(
                f"CREATE FUNCTION {table}_acquire(p_key text, p_owner text, p_ttl_ms bigint, p_limit integer)"
                " RETURNS bigint LANGUAGE sql AS 'SELECT 1::bigint'"
            )
            conn.execute(
                f"INSERT INTO {table} VALUES (%s, 'old', 1, clock_timestamp() + interval '1 minute')", (pg_key,)
            )
        store.create_schema()
        store.create_schema()  # idempotent
        assert store.acquire(pg_key, "big", 10, 3, 2) is not None  # the old holder counts as one slot
        assert store.acquire(pg_key, "more", 10, 3, 1) is None
        assert sorted(permits for _, _, _, permits in store.holders(pg_key)) == [1, 2]
    finally:
        with store._sync_pool("test").connection() as conn:
            conn.execute(f"DROP TABLE IF EXISTS {table}, {table}_queue; DROP SEQUENCE IF EXISTS {table}_token")
            conn.execute(f"DROP FUNCTION IF EXISTS {table}_acquire(text, text, bigint, integer, integer, integer)")
        store.close()
