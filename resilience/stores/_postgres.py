"""Lock and semaphore stores over PostgreSQL (psycopg 3 and psycopg_pool), sync and asyncio.

Every lease operation is one SQL statement (`_postgres_sql`) run in autocommit on a pooled
connection: atomic, one round trip, the database's clock only. Releases notify waiters through
`LISTEN`/`NOTIFY` (`_postgres_notify`).

psycopg is an optional dependency (extra `[postgres]`): it is imported here only, and only when
a store is made, so `import resilience.stores` works without it.
"""

from __future__ import annotations

import asyncio
import math
import threading
import time
import weakref
from typing import TYPE_CHECKING, Any, Final

from resilience._runtime._closing import Closing
from resilience.exceptions import ValidationError
from resilience.stores._postgres_notify import AsyncReleaseListener, SyncReleaseListener
from resilience.stores._postgres_sql import LockSql, SemaphoreSql, check_table

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = ["PostgresLockStore", "PostgresSemaphoreStore"]

_SYNC_HINT: Final = "a conninfo string or a psycopg_pool.ConnectionPool as the first argument"
_ASYNC_HINT: Final = "a conninfo string as the first argument, or async_pool=psycopg_pool.AsyncConnectionPool(...)"
_POOL_TIMEOUT: Final = 5.0
"""How long a call of a store-made pool waits for a connection before it fails."""
_CONNECT_TIMEOUT: Final = 5
"""`connect_timeout` of the connections a store makes (s)."""
_MAX_TTL: Final = 1e9
"""The longest ttl (s, about 31.7 years): `clock_timestamp()` plus it stays a valid timestamp."""
_PURGE_EVERY: Final = 60.0
"""How often (s, local clock) one release also purges long-ended rows."""
_DIAGNOSE_EVERY: Final = 60.0
"""How often (s) a pool timeout may try one direct connection to name its cause (reused meanwhile)."""
_DIAGNOSE_TIMEOUT: Final = 2
"""`connect_timeout` of that attempt (s): the diagnosis never waits longer than a short connect."""


def _psycopg() -> tuple[Any, Any]:
    try:
        import psycopg
        import psycopg_pool
    except ImportError as exc:  # pragma: no cover - the test environment has the extra
        msg = "the PostgreSQL stores need psycopg 3 and psycopg_pool: pip install 'resilience-pipeline[postgres]'"
        raise ValidationError(msg) from exc
    return psycopg, psycopg_pool


def _ttl_ms(ttl: object) -> int:
    """A ttl in whole milliseconds, rounded up (1 ms at least)."""
    if (type(ttl) is float or type(ttl) is int) and 0 < ttl <= _MAX_TTL:  # bool and NaN are refused
        return max(1, math.ceil(ttl * 1000 - 1e-9))
    msg = f"ttl: must be a positive number of seconds, at most {_MAX_TTL:g}, got {ttl!r}"
    raise ValidationError(msg)


def _check_str(option: str, value: object) -> str:
    if not isinstance(value, str):
        msg = f"{option}: must be a str, got {type(value).__name__}"
        raise ValidationError(msg)
    if "\x00" in value:
        msg = f"{option}: {value[:80]!r} cannot be stored in PostgreSQL text (it contains NUL)"
        raise ValidationError(msg)
    return value


def _answer(row: Sequence[Any] | None) -> tuple[int | None, float | None]:
    if row is None:
        return None, None
    token, left_ms = row
    return (int(token), None) if token is not None else (None, int(left_ms) / 1000)


def _semaphore_answer(value: int) -> tuple[int | None, float | None]:
    return (value, None) if value > 0 else (None, -value / 1000)


class _PostgresStore(Closing):
    """What both stores share: pools, notification, schema, closing."""

    _kind: str = "PostgresStore"
    _lease_info_takes_limit = False

    def __init__(self, conninfo_or_pool: Any, async_pool: Any, sql: LockSql | SemaphoreSql) -> None:
        psycopg, psycopg_pool = _psycopg()
        self._psycopg = psycopg
        self._sql = sql
        self._conninfo: str | None = None
        self._pool: Any = None
        self._own_pool = False
        self._async_pool: Any = async_pool
        self._async_pools: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Any] = weakref.WeakKeyDictionary()
        source = conninfo_or_pool
        if isinstance(source, str):
            self._conninfo = source
        elif isinstance(source, psycopg_pool.AsyncConnectionPool):
            if async_pool is not None:
                msg = f"{self._kind}: two async pools given; pass the sync one first or only async_pool="
                raise ValidationError(msg)
            self._async_pool = source
        elif isinstance(source, psycopg_pool.ConnectionPool):
            self._pool = source
        elif source is not None:
            msg = f"{self._kind}: the first argument must be {_SYNC_HINT}, got {source!r}"
            raise ValidationError(msg)
        if self._async_pool is not None and not isinstance(self._async_pool, psycopg_pool.AsyncConnectionPool):
            msg = f"{self._kind}: async_pool= must be a psycopg_pool.AsyncConnectionPool, got {async_pool!r}"
            raise ValidationError(msg)
        if source is None and self._async_pool is None:
            msg = f"{self._kind}: pass {_SYNC_HINT}, and/or {_ASYNC_HINT}"
            raise ValidationError(msg)
        self._pool_lock = threading.Lock()
        self._purged_at = time.monotonic()
        self._diagnosed_at = -_DIAGNOSE_EVERY
        self._cause: Exception | None = None  # what the last diagnosis of a pool timeout found
        self._listener: SyncReleaseListener | None = None
        self._async_listeners: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, AsyncReleaseListener] = (
            weakref.WeakKeyDictionary()
        )

    # -- what a lock and a semaphore do alike ------------------------------------------------

    def renew(self, key: str, owner: str, ttl: float) -> bool:
        """Push `owner`'s live lease (the lock, or its slot) out to now + `ttl`; False if it is not ours.

        Never re-acquires: a lease that ended stays ended.
        """
        params = (_ttl_ms(ttl), _check_str("key", key), _check_str("owner", owner))
        return bool(self._execute("renew", self._sql.renew, params) == 1)

    def release(self, key: str, owner: str) -> bool:
        """Free `owner`'s lease (True only if it held one) and wake the waiters on `key`."""
        params = (_check_str("key", key), _check_str("owner", owner))
        released = self._execute("release", self._sql.release, params) == 1
        if self._due_purge():
            self._execute("release", self._sql.purge, ())
        return bool(released)

    async def renew_async(self, key: str, owner: str, ttl: float) -> bool:
        """See `renew`."""
        params = (_ttl_ms(ttl), _check_str("key", key), _check_str("owner", owner))
        return bool((await self._execute_async("renew_async", self._sql.renew, params)) == 1)

    async def release_async(self, key: str, owner: str) -> bool:
        """See `release`."""
        params = (_check_str("key", key), _check_str("owner", owner))
        released = (await self._execute_async("release_async", self._sql.release, params)) == 1
        if self._due_purge():
            await self._execute_async("release_async", self._sql.purge, ())
        return bool(released)

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

    def _connect_kwargs(self) -> dict[str, Any]:
        return {"autocommit": True, "connect_timeout": _CONNECT_TIMEOUT}

    def _sync_pool(self, method: str) -> Any:
        pool = self._pool
        if pool is not None:
            return pool
        if self._conninfo is None:
            msg = f"{self._kind}.{method} needs a sync pool: pass {_SYNC_HINT}"
            raise ValidationError(msg)
        with self._pool_lock:
            if self._pool is None:
                _, psycopg_pool = _psycopg()
                pool = psycopg_pool.ConnectionPool(self._conninfo, **self._pool_options())
                pool.open(wait=False)
                self._pool = pool
                self._own_pool = True
            return self._pool

    def _pool_options(self) -> dict[str, Any]:
        """The pools the store makes itself: small, opened in the background, named after the table."""
        return {
            "kwargs": self._connect_kwargs(),
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
            _, psycopg_pool = _psycopg()
            pool = psycopg_pool.AsyncConnectionPool(self._conninfo, **self._pool_options())
            self._async_pools[loop] = pool
            await pool.open(wait=False)
        return pool

    def _execute(self, method: str, query: str, params: Sequence[Any] | dict[str, Any], *, fetch: bool = False) -> Any:
        """Run one statement: its first row when `fetch`, else its rowcount.

        `getconn`/`putconn` rather than `pool.connection()`: the same, minus a context manager
        (about a tenth of a round trip). A connection that is not in autocommit (a pool of
        yours) is committed, as `pool.connection()` would; `putconn` rolls back a failed one.
        """
        pool = self._sync_pool(method)
        try:
            conn = pool.getconn()
            try:
                cursor = conn.execute(query, params)
                result = cursor.fetchone() if fetch else cursor.rowcount
                if not conn.autocommit:
                    conn.commit()
            finally:
                pool.putconn(conn)
        except Exception as exc:
            if (cause := self._explain(exc, pool)) is not None:
                raise exc from cause
            raise
        return result

    async def _execute_async(
        self, method: str, query: str, params: Sequence[Any] | dict[str, Any], *, fetch: bool = False
    ) -> Any:
        pool = await self._get_async_pool(method)
        try:
            conn = await pool.getconn()
            try:
                cursor = await conn.execute(query, params)
                result = await cursor.fetchone() if fetch else cursor.rowcount
                if not conn.autocommit:
                    await conn.commit()
            finally:
                await pool.putconn(conn)
        except Exception as exc:
            if (cause := await self._explain_async(exc, pool)) is not None:
                raise exc from cause
            raise
        return result

    def _explain(self, exc: Exception, pool: Any) -> Exception | None:
        """Say what a store error means where psycopg does not; the error keeps its type.

        A missing table gets a note naming `create_schema()`. A pool that timed out waiting
        for a connection says nothing of why; one direct connection attempt finds the real
        cause (refused, bad password, no such database): a note, and the error's cause.
        """
        if not self._timed_out(exc):
            return None
        if not self._diagnosis_due():
            return self._noted(exc, self._cause)
        psycopg, _ = _psycopg()
        conninfo, kwargs = self._conninfo_of(pool)
        try:
            psycopg.connect(conninfo, **kwargs).close()
        except psycopg.Error as cause:
            self._cause = cause
        return self._noted(exc, self._cause)

    async def _explain_async(self, exc: Exception, pool: Any) -> Exception | None:
        """See `_explain`."""
        if not self._timed_out(exc):
            return None
        if not self._diagnosis_due():
            return self._noted(exc, self._cause)
        psycopg, _ = _psycopg()
        conninfo, kwargs = self._conninfo_of(pool)
        try:
            await (await psycopg.AsyncConnection.connect(conninfo, **kwargs)).close()
        except psycopg.Error as cause:
            self._cause = cause
        return self._noted(exc, self._cause)

    def _timed_out(self, exc: Exception) -> bool:
        """Whether `exc` is a pool timeout (worth a connection attempt); notes a missing table."""
        psycopg, psycopg_pool = _psycopg()
        if isinstance(exc, psycopg.errors.UndefinedTable | psycopg.errors.UndefinedFunction):
            exc.add_note(
                f"{self._kind}: the table {self._sql.table!r} (or its functions) does not exist in this database: "
                "call store.create_schema() (or create_schema_async()) once, or run its SQL (docs/postgres.md)"
            )
        return isinstance(exc, psycopg_pool.PoolTimeout)

    def _diagnosis_due(self) -> bool:
        """One direct connection attempt per `_DIAGNOSE_EVERY` at most: an outage is no connection storm."""
        now = time.monotonic()
        if now - self._diagnosed_at < _DIAGNOSE_EVERY:
            return False
        self._diagnosed_at, self._cause = now, None
        return True

    def _noted(self, exc: Exception, cause: Exception | None) -> Exception | None:
        if cause is not None:
            exc.add_note(f"{self._kind}: the pool could not connect to PostgreSQL: {str(cause).strip()}")
        return cause

    def _conninfo_of(self, pool: Any) -> tuple[str, dict[str, Any]]:
        if self._conninfo is not None:
            conninfo, kwargs = self._conninfo, self._connect_kwargs()
        else:
            conninfo, kwargs = pool.conninfo, {**(pool.kwargs or {}), "autocommit": True}
        return conninfo, {**kwargs, "connect_timeout": _DIAGNOSE_TIMEOUT}

    def _due_purge(self) -> bool:
        now = time.monotonic()
        if now - self._purged_at < _PURGE_EVERY:
            return False
        self._purged_at = now
        return True

    # -- schema ---------------------------------------------------------------------------------

    def create_schema(self) -> None:
        """Create the sequence, the table (and functions) if missing; safe to call concurrently."""
        pool = self._sync_pool("create_schema")
        try:
            with pool.connection() as conn, conn.transaction():
                conn.execute(self._sql.schema)
        except Exception as exc:
            if (cause := self._explain(exc, pool)) is not None:
                raise exc from cause
            raise

    async def create_schema_async(self) -> None:
        """See `create_schema`."""
        pool = await self._get_async_pool("create_schema_async")
        try:
            async with pool.connection() as conn, conn.transaction():
                await conn.execute(self._sql.schema)
        except Exception as exc:
            if (cause := await self._explain_async(exc, pool)) is not None:
                raise exc from cause
            raise

    # -- release notification ------------------------------------------------------------------

    def _is_free(self, key: str) -> bool:
        return self._execute("wait_released", self._sql.held, (key,), fetch=True) is None

    async def _is_free_async(self, key: str) -> bool:
        return await self._execute_async("wait_released_async", self._sql.held, (key,), fetch=True) is None

    def wait_released(self, key: str, timeout: float) -> bool:
        """Block until `key` is released (True; at once when it is free) or `timeout` seconds pass (False).

        True is a hint to try again now. A release wakes the longest-waiting waiter of this store
        (FIFO within the process; across processes the woken waiters race).
        """
        _check_str("key", key)
        pool = self._sync_pool("wait_released")
        with self._pool_lock:
            if self._listener is None:
                conninfo, kwargs = self._conninfo_of(pool)
                psycopg = self._psycopg
                self._listener = SyncReleaseListener(
                    lambda: psycopg.Connection.connect(conninfo, **kwargs), self._sql.channel
                )
            listener = self._listener
        return listener.wait(key, timeout, lambda: self._is_free(key))

    async def wait_released_async(self, key: str, timeout: float) -> bool:
        """See `wait_released`."""
        _check_str("key", key)
        pool = await self._get_async_pool("wait_released_async")
        loop = asyncio.get_running_loop()
        listener = self._async_listeners.get(loop)
        if listener is None:
            conninfo, kwargs = self._conninfo_of(pool)
            psycopg = self._psycopg

            async def connect() -> Any:
                return await psycopg.AsyncConnection.connect(conninfo, **kwargs)

            listener = self._async_listeners[loop] = AsyncReleaseListener(connect, self._sql.channel)
        return await listener.wait(key, timeout, lambda: self._is_free_async(key))

    # -- closing -----------------------------------------------------------------------------------

    def close(self) -> None:
        """Stop the sync listener and close the pool the store made (a pool you passed stays open)."""
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

    def _acquire_params(self, key: str, owner: str, ttl: float) -> dict[str, Any]:
        return {"key": _check_str("key", key), "owner": _check_str("owner", owner), "ttl": _ttl_ms(ttl)}

    def acquire(self, key: str, owner: str, ttl: float) -> int | None:
        """Take the free lock for `owner` for `ttl` seconds: its token, or None if held by another."""
        return self.acquire_or_ttl(key, owner, ttl)[0]

    def acquire_or_ttl(self, key: str, owner: str, ttl: float) -> tuple[int | None, float | None]:
        """`(token, None)` when acquired; `(None, remaining seconds or None)` when held by another."""
        params = self._acquire_params(key, owner, ttl)
        return _answer(self._execute("acquire", self._sql.acquire, params, fetch=True))

    async def acquire_async(self, key: str, owner: str, ttl: float) -> int | None:
        """See `acquire`."""
        return (await self.acquire_or_ttl_async(key, owner, ttl))[0]

    async def acquire_or_ttl_async(self, key: str, owner: str, ttl: float) -> tuple[int | None, float | None]:
        """See `acquire_or_ttl`."""
        params = self._acquire_params(key, owner, ttl)
        return _answer(await self._execute_async("acquire_async", self._sql.acquire, params, fetch=True))


class PostgresSemaphoreStore(_PostgresStore):
    """A semaphore store over PostgreSQL: up to `limit` holders per key, each with its own token.

    One row per holder; acquiring is one call of the function `<table>_acquire`, which counts
    the live holders under a per-key advisory lock. Same arguments as `PostgresLockStore`.
    """

    _kind = "PostgresSemaphoreStore"
    _lease_info_takes_limit = True
    """`acquire_or_ttl` takes the `limit` too (the lease engine looks for this flag)."""

    def __init__(
        self, conninfo_or_pool: Any = None, *, async_pool: Any = None, table: str = "resilience_semaphores"
    ) -> None:
        super().__init__(conninfo_or_pool, async_pool, SemaphoreSql(check_table(self._kind, table)))

    @staticmethod
    def _limit(limit: object) -> int:
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit < 2**31:
            msg = f"limit: must be an int >= 1, got {limit!r}"
            raise ValidationError(msg)
        return limit

    def _acquire_params(self, key: str, owner: str, ttl: float, limit: int) -> tuple[str, str, int, int]:
        return _check_str("key", key), _check_str("owner", owner), _ttl_ms(ttl), self._limit(limit)

    def acquire(self, key: str, owner: str, ttl: float, limit: int) -> int | None:
        """Take a slot for `owner` if fewer than `limit` are held: its token, or None."""
        return self.acquire_or_ttl(key, owner, ttl, limit)[0]

    def acquire_or_ttl(self, key: str, owner: str, ttl: float, limit: int) -> tuple[int | None, float | None]:
        """`(token, None)` when a slot is taken; `(None, seconds until the first slot frees)` when full."""
        params = self._acquire_params(key, owner, ttl, limit)
        return _semaphore_answer(int(self._execute("acquire", self._sql.acquire, params, fetch=True)[0]))

    async def acquire_async(self, key: str, owner: str, ttl: float, limit: int) -> int | None:
        """See `acquire`."""
        return (await self.acquire_or_ttl_async(key, owner, ttl, limit))[0]

    async def acquire_or_ttl_async(
        self, key: str, owner: str, ttl: float, limit: int
    ) -> tuple[int | None, float | None]:
        """See `acquire_or_ttl`."""
        params = self._acquire_params(key, owner, ttl, limit)
        row = await self._execute_async("acquire_async", self._sql.acquire, params, fetch=True)
        return _semaphore_answer(int(row[0]))
