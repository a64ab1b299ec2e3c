"""Lock and semaphore stores over PostgreSQL (psycopg 3 and psycopg_pool), sync and asyncio.

Every lease operation is one SQL statement (`_postgres_sql`) run in autocommit on a pooled
connection: atomic, one round trip, the database's clock only. Releases notify waiters through
`LISTEN`/`NOTIFY` (`_postgres_notify`).

psycopg is an optional dependency (extra `[postgres]`): it is imported here only, and only when
a store is made, so `import resilience.stores` works without it.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
import weakref
from dataclasses import dataclass, replace
from functools import partial
from typing import TYPE_CHECKING, Any, Final, Generic, TypeVar

from resilience._runtime._closing import Closing
from resilience._validation import check_semaphore_permits, ttl_ms
from resilience.exceptions import ValidationError
from resilience.stores._info import HolderInfo, HoldersFromInfo, LockInfo, acquire_answer, lock_mode
from resilience.stores._postgres_notify import AsyncReleaseListener, SyncReleaseListener
from resilience.stores._postgres_sql import LockSql, SemaphoreSql, check_table
from resilience.stores._protocols import StoreCapabilities
from resilience.stores._redis_scripts import QUEUE_ENTRY_MS
from resilience.stores._steps import Steps, run_steps, run_steps_async

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["PostgresLockStore", "PostgresSemaphoreStore"]

_SYNC_HINT: Final = "a conninfo string or a psycopg_pool.ConnectionPool as the first argument"
_ASYNC_HINT: Final = "a conninfo string as the first argument, or async_pool=psycopg_pool.AsyncConnectionPool(...)"
_POOL_TIMEOUT: Final = 5.0
"""How long a call of a store-made pool waits for a connection before it fails."""
_CONNECT_TIMEOUT: Final = 5
"""`connect_timeout` of the connections a store makes (s)."""
_CONNECT_KWARGS: Final = {"autocommit": True, "connect_timeout": _CONNECT_TIMEOUT}
_PURGE_EVERY: Final = 60.0
"""How often (s, local clock) one release also purges long-ended rows."""
_DIAGNOSE_EVERY: Final = 60.0
"""How often (s) a pool timeout may try one direct connection to name its cause (reused meanwhile)."""
_DIAGNOSE_TIMEOUT: Final = 2
"""`connect_timeout` of that attempt (s): the diagnosis never waits longer than a short connect."""
_KEEP_FOR: Final = 1.0
"""How long (s) the store keeps one pool connection between statements before it hands it back.

The hot path (one caller at a time) skips the pool's checkout and check-in; handed back at the
next statement after this long, the connection meets the pool's checks again (its state, its
max_lifetime, a `check=` callback), and so does the one the store takes next."""


def _psycopg() -> tuple[Any, Any]:
    try:
        import psycopg
        import psycopg_pool
    except ImportError as exc:  # pragma: no cover - the test environment has the extra
        msg = "the PostgreSQL stores need psycopg 3 and psycopg_pool: pip install 'resilience-pipeline[postgres]'"
        raise ValidationError(msg) from exc
    return psycopg, psycopg_pool


def _check_str(option: str, value: object) -> str:
    if not isinstance(value, str):
        msg = f"{option}: must be a str, got {type(value).__name__}"
        raise ValidationError(msg)
    if "\x00" in value:
        msg = f"{option}: {value[:80]!r} cannot be stored in PostgreSQL text (it contains NUL)"
        raise ValidationError(msg)
    return value


def _params(key: str, owner: str | None = None, ttl: float | None = None, **more: object) -> dict[str, Any]:
    """A statement's named parameters, checked: `key` and `owner` as text (owner NULL when None), `ttl` in ms."""
    params: dict[str, Any] = {
        "key": _check_str("key", key),
        "owner": None if owner is None else _check_str("owner", owner),
        **more,
    }
    if ttl is not None:
        params["ttl"] = ttl_ms(ttl)
    return params


_T = TypeVar("_T")


@dataclass(slots=True)  # not frozen: a frozen dataclass costs three times as much to build, per statement
class _Statement(Generic[_T]):
    """One statement of a store method and what its rows answer: built once, run by the sync or the async shell."""

    query: str
    params: dict[str, Any]
    answer: Callable[[list[Any]], _T]
    # False for a statement that returns none (the purge): nothing is fetched (asking psycopg
    # whether there are rows, `cursor.description`, costs a statement more than a µs).
    rows: bool = True


def _acquired(rows: list[Any]) -> tuple[int | None, float | None]:
    """The acquire functions' answer (`acquire_answer`), in the one row's one column.

    0, no time told: the lock's holders are gone but a waiter goes first; the semaphore's slots
    are free but promised to waiters ahead, or its holders' time is unknown.
    """
    return acquire_answer(rows[0][0])


@dataclass(slots=True, eq=False)
class _Kept:
    """The connection a store keeps between statements (`_PostgresStore._take_kept`), with where it came from."""

    busy: bool = False  # an asyncio caller runs on it (the sync side has a lock)
    conn: Any = None
    pool: Any = None  # the pool it came from
    since: float = 0.0
    pid: int = 0  # the process that took it


class _PostgresStore(Closing):
    """What both stores share: pools, notification, schema, closing."""

    _kind: str = "PostgresStore"
    capabilities: StoreCapabilities
    _info: Callable[[str, list[Any]], LockInfo | None]  # the `LockInfo` of the holders' rows

    def __init__(self, conninfo_or_pool: Any, async_pool: Any, sql: LockSql | SemaphoreSql) -> None:
        psycopg, psycopg_pool = _psycopg()
        self._psycopg, self._psycopg_pool = psycopg, psycopg_pool
        self._sql = sql
        self._conninfo: str | None = conninfo_or_pool if isinstance(conninfo_or_pool, str) else None
        self._pool: Any = conninfo_or_pool if isinstance(conninfo_or_pool, psycopg_pool.ConnectionPool) else None
        self._own_pool = False
        self._async_pool: Any = async_pool
        self._async_pools: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Any] = weakref.WeakKeyDictionary()
        if isinstance(conninfo_or_pool, psycopg_pool.AsyncConnectionPool):
            if async_pool is not None:
                msg = f"{self._kind}: two async pools given; pass the sync one first or only async_pool="
                raise ValidationError(msg)
            self._async_pool = conninfo_or_pool
        elif conninfo_or_pool is not None and self._conninfo is None and self._pool is None:
            msg = f"{self._kind}: the first argument must be {_SYNC_HINT}, got {conninfo_or_pool!r}"
            raise ValidationError(msg)
        if self._async_pool is not None and not isinstance(self._async_pool, psycopg_pool.AsyncConnectionPool):
            msg = f"{self._kind}: async_pool= must be a psycopg_pool.AsyncConnectionPool, got {async_pool!r}"
            raise ValidationError(msg)
        if conninfo_or_pool is None and self._async_pool is None:
            msg = f"{self._kind}: pass {_SYNC_HINT}, and/or {_ASYNC_HINT}"
            raise ValidationError(msg)
        self._pool_lock = threading.Lock()
        self._purged_at = time.monotonic()
        self._diagnosed_at = -_DIAGNOSE_EVERY
        self._cause: Exception | None = None  # what the last diagnosis of a pool timeout found
        self._listener: SyncReleaseListener | None = None
        # The connection kept between statements (`_execute`), for one caller at a time.
        self._kept = _Kept()
        self._kept_lock = threading.Lock()
        self._kept_async: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Kept] = weakref.WeakKeyDictionary()
        self._async_listeners: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, AsyncReleaseListener] = (
            weakref.WeakKeyDictionary()
        )
        # The flavours it serves: those it has a pool (or a conninfo) for.
        self.capabilities = replace(
            self.capabilities, serves_sync=self.has_sync_client, serves_async=self.has_async_client
        )

    # -- what a lock and a semaphore do alike ------------------------------------------------

    def renew(self, key: str, owner: str, ttl: float) -> bool:
        """Push `owner`'s live lease (the lock, or its slots) out to now + `ttl`; False if it is not ours.

        A shared hold of the lock too. Never re-acquires: a lease that ended stays ended.
        """
        return self._execute("renew", self._renew(key, owner, ttl))

    async def renew_async(self, key: str, owner: str, ttl: float) -> bool:
        """See `renew`."""
        return await self._execute_async("renew_async", self._renew(key, owner, ttl))

    def _renew(self, key: str, owner: str, ttl: float) -> _Statement[bool]:
        return _Statement(self._sql.renew, _params(key, owner, ttl), lambda rows: len(rows) == 1)

    def release(self, key: str, owner: str) -> bool:
        """Free `owner`'s lease (True only if it held one) and wake the waiters on `key`.

        A waiter that holds nothing leaves the queue instead (False).
        """
        released = self._execute("release", self._release(key, owner))
        if (purge := self._due_purge()) is not None:
            self._execute("release", purge)
        return released

    async def release_async(self, key: str, owner: str) -> bool:
        """See `release`."""
        released = await self._execute_async("release_async", self._release(key, owner))
        if (purge := self._due_purge()) is not None:
            await self._execute_async("release_async", purge)
        return released

    def _release(self, key: str, owner: str) -> _Statement[bool]:
        # The first value is 1 when `owner` held the lease (the lock's statement: no row when nothing changed).
        return _Statement(self._sql.release, _params(key, owner), lambda rows: bool(rows) and rows[0][0] == 1)

    def info(self, key: str) -> LockInfo | None:
        """`key`'s live holders (by token; time left on the database's clock), or None when free.

        A lock's also counts its waiters, and its mode is "shared" when shared holders hold it.
        A semaphore's waiters are not counted (`waiters` is None). `SupportsInspection`.
        """
        return self._execute("info", self._holders(key))

    async def info_async(self, key: str) -> LockInfo | None:
        """See `info`."""
        return await self._execute_async("info_async", self._holders(key))

    def _holders(self, key: str) -> _Statement[LockInfo | None]:
        return _Statement(self._sql.holders, _params(key), partial(self._info, key))

    def force_release(self, key: str) -> bool:
        """Free `key` whoever holds it (every shared holder of a lock too), in one statement: True if it was held.

        The holders' next renewal answers False; waiters are notified as by a release.
        """
        return self._execute("force_release", self._force_release(key))

    async def force_release_async(self, key: str) -> bool:
        """See `force_release`."""
        return await self._execute_async("force_release_async", self._force_release(key))

    def _force_release(self, key: str) -> _Statement[bool]:
        # It answers how many holds it freed. No owner: none of the lock's queued waiters is the caller.
        return _Statement(self._sql.force_release, _params(key), lambda rows: int(rows[0][0]) > 0)

    # -- pools ---------------------------------------------------------------------------------

    @property
    def table(self) -> str:
        """The table that holds the leases."""
        return self._sql.table

    @property
    def has_sync_client(self) -> bool:
        """Whether the sync methods work (a conninfo or a `ConnectionPool` was given)."""
        return self._conninfo is not None or self._pool is not None

    @property
    def has_async_client(self) -> bool:
        """Whether the `_async` methods work (a conninfo or an `AsyncConnectionPool` was given)."""
        return self._conninfo is not None or self._async_pool is not None

    def _sync_pool(self, method: str) -> Any:
        pool = self._pool
        if pool is not None:
            return pool
        if self._conninfo is None:
            msg = f"{self._kind}.{method} needs a sync pool: pass {_SYNC_HINT}"
            raise ValidationError(msg)
        with self._pool_lock:
            if self._pool is None:
                pool = self._psycopg_pool.ConnectionPool(self._conninfo, **self._pool_options())
                pool.open(wait=False)
                self._pool, self._own_pool = pool, True
            return self._pool

    def _pool_options(self) -> dict[str, Any]:
        """The pools the store makes itself: small, opened in the background, named after the table."""
        return {
            "kwargs": dict(_CONNECT_KWARGS),
            "min_size": 1,
            "max_size": 8,
            "open": False,
            "timeout": _POOL_TIMEOUT,
            "num_workers": 1,
            "name": f"resilience-{self._sql.table}",
        }

    async def _get_async_pool(self, method: str) -> Any:
        if self._async_pool is not None:
            return self._async_pool
        if self._conninfo is None:
            msg = f"{self._kind}.{method} needs an async pool: pass {_ASYNC_HINT}"
            raise ValidationError(msg)
        loop = asyncio.get_running_loop()
        pool = self._async_pools.get(loop)
        if pool is None:
            pool = self._psycopg_pool.AsyncConnectionPool(self._conninfo, **self._pool_options())
            self._async_pools[loop] = pool
            await pool.open(wait=False)
        return pool

    def _execute(self, method: str, statement: _Statement[_T]) -> _T:
        """Run one statement and give its answer, from its rows (none when it returns no rows).

        On the connection the store keeps (`_take_kept`) when no other caller is using it;
        else on one checked out of the pool (`getconn`/`putconn`). A connection that is not in
        autocommit (a pool of yours) is committed, as `pool.connection()` would; a statement
        that fails gives its connection back to the pool at once, which rolls it back (or
        discards a broken one).
        """
        pool = self._sync_pool(method)
        kept = self._kept if self._kept_lock.acquire(blocking=False) else None
        try:
            return run_steps(self._statement_steps(statement, pool, kept, self._psycopg.connect))
        finally:
            if kept is not None:
                self._kept_lock.release()

    async def _execute_async(self, method: str, statement: _Statement[_T]) -> _T:
        """See `_execute` (the kept connection: one per event loop)."""
        pool = await self._get_async_pool(method)
        loop = asyncio.get_running_loop()
        kept = self._kept_async.setdefault(loop, _Kept())
        mine, kept.busy = not kept.busy, True
        try:
            connect = self._psycopg.AsyncConnection.connect
            return await run_steps_async(self._statement_steps(statement, pool, kept if mine else None, connect))
        finally:
            if mine:
                kept.busy = False
                if self._kept_async.get(loop) is not kept and kept.conn is not None:  # `aclose` ran meanwhile
                    conn, kept.conn = kept.conn, None
                    await kept.pool.putconn(conn)

    def _statement_steps(
        self, statement: _Statement[_T], pool: Any, kept: _Kept | None, connect: Callable[..., Any]
    ) -> Steps[_T]:
        """`_execute`'s work, on the `kept` connection (None: one checked out of `pool`)."""
        try:
            conn = (yield pool.getconn()) if kept is None else (yield from self._take_kept(kept, pool))
            try:
                cursor = yield conn.execute(statement.query, statement.params)
                rows = (yield cursor.fetchall()) if statement.rows else []
                if not conn.autocommit:
                    yield conn.commit()
            except BaseException:
                if kept is not None:
                    kept.conn = None
                yield pool.putconn(conn)
                raise
            if kept is None:
                yield pool.putconn(conn)
        except Exception as exc:
            yield from self._explain(exc, pool, connect)
            raise
        return statement.answer(rows)

    @staticmethod
    def _take_kept(kept: _Kept, pool: Any) -> Steps[Any]:
        """The kept connection; one checked out of `pool` when there is none or it is `_KEEP_FOR` old.

        The old one goes back to the pool it came from, so the pool's checks still see it (a
        forked child drops its parent's untouched: the connection is the parent's).
        """
        now, pid = time.monotonic(), os.getpid()
        if kept.conn is not None and (now - kept.since > _KEEP_FOR or kept.pool is not pool or kept.pid != pid):
            conn, kept.conn = kept.conn, None
            if kept.pid == pid:
                yield kept.pool.putconn(conn)
        if kept.conn is None:
            kept.conn, kept.pool, kept.since, kept.pid = (yield pool.getconn()), pool, now, pid
        return kept.conn

    def _explain(self, exc: Exception, pool: Any, connect: Callable[..., Any]) -> Steps[None]:
        """Say what a store error means where psycopg does not; the error keeps its type.

        A missing table gets a note naming `create_schema()`. A pool that timed out waiting
        for a connection says nothing of why; one direct connection attempt (psycopg's sync
        or async `connect`) finds the real cause (refused, bad password, no such database):
        a note, and the error's cause. One attempt per `_DIAGNOSE_EVERY` at most (an outage is
        no connection storm); meanwhile the last attempt's finding is reused.
        """
        if isinstance(exc, self._psycopg.errors.UndefinedTable | self._psycopg.errors.UndefinedFunction):
            exc.add_note(
                f"{self._kind}: the table {self._sql.table!r} (or its functions) does not exist in this database: "
                "call store.create_schema() (or create_schema_async()) once, or run its SQL (docs/postgres.md)"
            )
        if not isinstance(exc, self._psycopg_pool.PoolTimeout):
            return
        now = time.monotonic()
        if now - self._diagnosed_at >= _DIAGNOSE_EVERY:
            self._diagnosed_at, self._cause = now, None
            try:
                yield (yield self._connector(pool, connect)()).close()
            except self._psycopg.Error as cause:
                self._cause = cause
        if self._cause is not None:
            exc.add_note(f"{self._kind}: the pool could not connect to PostgreSQL: {str(self._cause).strip()}")
            exc.__cause__ = self._cause

    def _connector(self, pool: Any, connect: Callable[..., Any]) -> Callable[[], Any]:
        """`connect` (psycopg's, sync or async) bound to `pool`'s database: a direct connection."""
        if self._conninfo is not None:
            conninfo, kwargs = self._conninfo, _CONNECT_KWARGS
        else:
            conninfo, kwargs = pool.conninfo, {**(pool.kwargs or {}), "autocommit": True}
        return partial(connect, conninfo, **{**kwargs, "connect_timeout": _DIAGNOSE_TIMEOUT})

    def _due_purge(self) -> _Statement[int] | None:
        """The purge of long-ended rows, when one is due (once per `_PURGE_EVERY`)."""
        now = time.monotonic()
        if now - self._purged_at < _PURGE_EVERY:
            return None
        self._purged_at = now
        return _Statement(self._sql.purge, {}, len, rows=False)

    # -- schema ---------------------------------------------------------------------------------

    def create_schema(self) -> None:
        """Create the sequence, the table (and functions) if missing; safe to call concurrently."""
        pool = self._sync_pool("create_schema")
        try:
            with pool.connection() as conn, conn.transaction():
                conn.execute(self._sql.schema)
        except Exception as exc:
            run_steps(self._explain(exc, pool, self._psycopg.connect))
            raise

    async def create_schema_async(self) -> None:
        """See `create_schema`."""
        pool = await self._get_async_pool("create_schema_async")
        try:
            async with pool.connection() as conn, conn.transaction():
                await conn.execute(self._sql.schema)
        except Exception as exc:
            await run_steps_async(self._explain(exc, pool, self._psycopg.AsyncConnection.connect))
            raise

    # -- release notification ------------------------------------------------------------------

    def wait_released(self, key: str, timeout: float, owner: str | None = None) -> bool:
        """Block until `key` is released (True; at once when it is free) or `timeout` seconds pass (False).

        True is a hint to try again now. A release wakes the longest-waiting waiter of this store
        (FIFO within the process; across processes the woken waiters race).
        """
        return self._wait_for(key, timeout, self._is_free(key, owner), owner)

    def _is_free(self, key: str, owner: str | None, **limits: int) -> _Statement[bool]:
        """Whether a waiter may try now.

        Its turn, when it waits in the database's queue (`owner`); else whether `key` is free.
        """
        if owner is None:
            return _Statement(self._sql.held, _params(key), lambda rows: not rows)
        return _Statement(self._sql.turn, _params(key, owner, **limits), lambda rows: bool(rows[0][0]))

    def _wait_for(self, key: str, timeout: float, is_free: _Statement[bool], owner: str | None = None) -> bool:
        pool = self._sync_pool("wait_released")
        with self._pool_lock:
            if self._listener is None:
                connect = self._connector(pool, self._psycopg.Connection.connect)
                self._listener = SyncReleaseListener(connect, self._sql.channel)
            listener = self._listener
        return listener.wait(key, timeout, lambda: self._execute("wait_released", is_free), owner=owner)

    async def wait_released_async(self, key: str, timeout: float, owner: str | None = None) -> bool:
        """See `wait_released`."""
        return await self._wait_for_async(key, timeout, self._is_free(key, owner), owner)

    async def _wait_for_async(
        self, key: str, timeout: float, is_free: _Statement[bool], owner: str | None = None
    ) -> bool:
        pool = await self._get_async_pool("wait_released_async")
        loop = asyncio.get_running_loop()
        listener = self._async_listeners.get(loop)
        if listener is None:
            connect = self._connector(pool, self._psycopg.AsyncConnection.connect)
            listener = self._async_listeners[loop] = AsyncReleaseListener(connect, self._sql.channel)
        return await listener.wait(
            key, timeout, lambda: self._execute_async("wait_released_async", is_free), owner=owner
        )

    # -- closing -----------------------------------------------------------------------------------

    def close(self) -> None:
        """Stop the sync listener and close the pool the store made (a pool you passed stays open)."""
        with self._kept_lock:
            conn, self._kept.conn = self._kept.conn, None
            if conn is not None and self._kept.pid == os.getpid():
                self._kept.pool.putconn(conn)
        with self._pool_lock:
            listener, self._listener = self._listener, None
            pool = self._pool if self._own_pool else None
            if pool is not None:
                self._pool, self._own_pool = None, False
        if listener is not None:
            listener.close()
        if pool is not None:
            pool.close()

    async def aclose(self) -> None:
        """Stop this loop's listener, close the pools the store made (yours stay open), then `close()`."""
        loop = asyncio.get_running_loop()
        listener = self._async_listeners.pop(loop, None)
        if listener is not None:
            await listener.aclose()
        kept = self._kept_async.pop(loop, None)
        if kept is not None and kept.conn is not None and not kept.busy:  # a busy one goes back when done
            conn, kept.conn = kept.conn, None
            await kept.pool.putconn(conn)
        pool = self._async_pools.pop(loop, None)
        if pool is not None:
            await pool.close()
        await asyncio.to_thread(self.close)

    def __repr__(self) -> str:
        flavours = [name for name, ok in (("sync", self.has_sync_client), ("async", self.has_async_client)) if ok]
        return f"{type(self).__name__}(table={self._sql.table!r}, flavours={'+'.join(flavours)})"


class PostgresLockStore(_PostgresStore):
    """A lock store over PostgreSQL: one row per key, one statement per call.

    Args:
        conninfo_or_pool: a libpq connection string (`"postgresql://user@host/db"`): the store
            makes a small sync pool, and one async pool per event loop, on first use; or a
            `psycopg_pool.ConnectionPool` (enables the sync methods) or
            `psycopg_pool.AsyncConnectionPool` (the `_async` ones). None with `async_pool`.
        async_pool: a `psycopg_pool.AsyncConnectionPool` for the `_async` methods.
        table: the table's name (lower-case, optionally `schema.table`); the sequence is
            `<table>_token` and the `NOTIFY` channel is `<table>`.

    Call `create_schema()` once (it is idempotent). Tokens come from the sequence: they only
    increase, per key and across keys, across release, expiry and server restarts (docs/postgres.md).
    """

    _kind = "PostgresLockStore"

    def __init__(
        self, conninfo_or_pool: Any = None, *, async_pool: Any = None, table: str = "resilience_locks"
    ) -> None:
        super().__init__(conninfo_or_pool, async_pool, LockSql(check_table(self._kind, table)))

    capabilities = StoreCapabilities(kind="lock", fair_queue=True)  # waiters queue in the database (`acquire_or_queue`)
    _sql: LockSql

    def _acquire(
        self, key: str, owner: str, ttl: float, *, shared: bool, join: bool
    ) -> _Statement[tuple[int | None, float | None]]:
        return _Statement(self._sql.acquire, _params(key, owner, ttl, shared=shared, join=join), _acquired)

    def acquire(self, key: str, owner: str, ttl: float) -> int | None:
        """Take the free lock for `owner` for `ttl` seconds: its token, or None if held (or waited for) by another."""
        return self.acquire_or_ttl(key, owner, ttl)[0]

    def acquire_shared(self, key: str, owner: str, ttl: float) -> int | None:
        """A shared hold (`SupportsSharedHolds`): refused while an exclusive lease is held or waits first."""
        return self.acquire_or_ttl(key, owner, ttl, shared=True)[0]

    def acquire_or_ttl(
        self, key: str, owner: str, ttl: float, *, shared: bool = False
    ) -> tuple[int | None, float | None]:
        """`(token, None)` when acquired; `(None, remaining seconds or None)` when refused.

        A free key that waiters queue for goes to the first of them (no time left is reported
        to anyone else). With `shared`, a shared hold.
        """
        return self._execute("acquire", self._acquire(key, owner, ttl, shared=shared, join=False))

    def acquire_or_queue(
        self, key: str, owner: str, ttl: float, *, shared: bool = False
    ) -> tuple[int | None, float | None]:
        """`acquire_or_ttl` for a caller that will wait: refused, `owner` joins the key's FIFO queue.

        The entry lives 3 s unless `owner` tries again; `release(key, owner)` by a waiter that
        gives up leaves the queue.
        """
        return self._execute("acquire", self._acquire(key, owner, ttl, shared=shared, join=True))

    async def acquire_async(self, key: str, owner: str, ttl: float) -> int | None:
        """See `acquire`."""
        return (await self.acquire_or_ttl_async(key, owner, ttl))[0]

    async def acquire_shared_async(self, key: str, owner: str, ttl: float) -> int | None:
        """See `acquire_shared`."""
        return (await self.acquire_or_ttl_async(key, owner, ttl, shared=True))[0]

    async def acquire_or_ttl_async(
        self, key: str, owner: str, ttl: float, *, shared: bool = False
    ) -> tuple[int | None, float | None]:
        """See `acquire_or_ttl`."""
        return await self._execute_async("acquire_async", self._acquire(key, owner, ttl, shared=shared, join=False))

    async def acquire_or_queue_async(
        self, key: str, owner: str, ttl: float, *, shared: bool = False
    ) -> tuple[int | None, float | None]:
        """See `acquire_or_queue`."""
        return await self._execute_async("acquire_async", self._acquire(key, owner, ttl, shared=shared, join=True))

    @staticmethod
    def _info(key: str, rows: list[Any]) -> LockInfo | None:
        # A row: owner, token, ms left, shared, and how many requests wait in the key's queue.
        if not rows:
            return None
        holders = tuple(HolderInfo(owner, int(token), int(left_ms) / 1000) for owner, token, left_ms, _, _ in rows)
        return LockInfo(key, lock_mode(shared=bool(rows[0][3])), holders, int(rows[0][4]))


class PostgresSemaphoreStore(_PostgresStore, HoldersFromInfo):
    """A semaphore store over PostgreSQL: up to `limit` slots per key, each holder with its own token.

    One row per holder, with the `permits` it took (`SupportsPermits`); acquiring is one call
    of the function `<table>_acquire`, which counts the live holders' permits under a per-key
    advisory lock. Waiters queue fairly in `<table>_queue` (`acquire_or_queue`): free slots go
    to them in arrival order, and a request that does not fit is not overtaken by later ones.
    A release notifies every waiter of the key (each checks whether its slots are free). Same
    arguments as `PostgresLockStore`.
    """

    _kind = "PostgresSemaphoreStore"
    # Waiters queue in the store (`acquire_or_queue`); its `acquire_or_ttl` takes the `limit` too.
    capabilities = StoreCapabilities(kind="semaphore", fair_queue=True, lease_info_takes_limit=True)

    _sql: SemaphoreSql

    def __init__(
        self, conninfo_or_pool: Any = None, *, async_pool: Any = None, table: str = "resilience_semaphores"
    ) -> None:
        super().__init__(conninfo_or_pool, async_pool, SemaphoreSql(check_table(self._kind, table)))

    @staticmethod
    def _limit(limit: int, permits: int = 1) -> dict[str, int]:
        check_semaphore_permits(limit, permits, limit_below=2**31)
        return {"limit": limit, "permits": permits}

    def _acquire(
        self, key: str, owner: str, ttl: float, limit: int, permits: int, *, join: bool
    ) -> _Statement[tuple[int | None, float | None]]:
        params = _params(key, owner, ttl, **self._limit(limit, permits), entry_ms=QUEUE_ENTRY_MS if join else 0)
        return _Statement(self._sql.acquire, params, _acquired)

    def acquire(self, key: str, owner: str, ttl: float, limit: int, permits: int = 1) -> int | None:
        """Take `permits` slots for `owner` if that many are free: its token, or None."""
        return self.acquire_or_ttl(key, owner, ttl, limit, permits)[0]

    def acquire_or_ttl(
        self, key: str, owner: str, ttl: float, limit: int, permits: int = 1
    ) -> tuple[int | None, float | None]:
        """`(token, None)` when the slots are taken; `(None, seconds until the first holder's lease ends)`.

        `(None, None)` when enough slots are free but promised to waiters queued ahead.
        """
        return self._execute("acquire", self._acquire(key, owner, ttl, limit, permits, join=False))

    def acquire_or_queue(
        self, key: str, owner: str, ttl: float, limit: int, permits: int = 1
    ) -> tuple[int | None, float | None]:
        """`acquire_or_ttl` for a caller that will wait: refused, `owner` joins the key's FIFO queue.

        The entry lives `QUEUE_ENTRY_MS` unless `owner` tries again; `release(key, owner)` by a
        waiter that gives up leaves the queue.
        """
        return self._execute("acquire", self._acquire(key, owner, ttl, limit, permits, join=True))

    async def acquire_async(self, key: str, owner: str, ttl: float, limit: int, permits: int = 1) -> int | None:
        """See `acquire`."""
        return (await self.acquire_or_ttl_async(key, owner, ttl, limit, permits))[0]

    async def acquire_or_ttl_async(
        self, key: str, owner: str, ttl: float, limit: int, permits: int = 1
    ) -> tuple[int | None, float | None]:
        """See `acquire_or_ttl`."""
        return await self._execute_async("acquire_async", self._acquire(key, owner, ttl, limit, permits, join=False))

    async def acquire_or_queue_async(
        self, key: str, owner: str, ttl: float, limit: int, permits: int = 1
    ) -> tuple[int | None, float | None]:
        """See `acquire_or_queue`."""
        return await self._execute_async("acquire_async", self._acquire(key, owner, ttl, limit, permits, join=True))

    @staticmethod
    def _info(key: str, rows: list[Any]) -> LockInfo | None:
        # A row: owner, token, ms left, permits.
        holders = tuple(
            HolderInfo(owner, int(token), int(left) / 1000, int(permits)) for owner, token, left, permits in rows
        )
        return LockInfo(key, "semaphore", holders, None) if holders else None

    def wait_released(
        self, key: str, timeout: float, owner: str | None = None, limit: int | None = None, permits: int = 1
    ) -> bool:
        """See `PostgresLockStore.wait_released`.

        With `owner` and `limit` (a queued waiter asking for `permits`): True at once when its
        slots are free for it.
        """
        if owner is None or limit is None:
            return super().wait_released(key, timeout)
        return self._wait_for(key, timeout, self._is_free(key, owner, **self._limit(limit, permits)))

    async def wait_released_async(
        self, key: str, timeout: float, owner: str | None = None, limit: int | None = None, permits: int = 1
    ) -> bool:
        """See `wait_released`."""
        if owner is None or limit is None:
            return await super().wait_released_async(key, timeout)
        return await self._wait_for_async(key, timeout, self._is_free(key, owner, **self._limit(limit, permits)))
