"""`python -m resilience locks ...` (console script `resilience`): who holds which lock.

    resilience locks --redis redis://host:6379/0 list
    resilience locks --postgres postgresql://app@db/app show order:42
    resilience locks --redis redis://host release order:42 --force
    resilience locks --postgres postgresql://app@db/app watch

It reads the stores' own layout (Redis hashes `<prefix>:<key>`, the PostgreSQL lock table)
and releases through the stores' own owner-checked release, with the owner it just read: a
lease that changed hands in between is left alone. Exit codes: 0 done, 1 the key is not held
or the server failed, 2 bad arguments (including a URL or DSN that cannot be parsed).
"""

from __future__ import annotations

import argparse
import math
import sys
import time
import urllib.parse
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import TextIO

__all__ = ["main"]

_FENCING = (
    "Breaking a lease does not stop its holder: it may still be running. What keeps a stale"
    " holder out is fencing: the next holder gets a larger token, and a resource that checks"
    " tokens refuses the stale holder's writes."
)


class CliError(Exception):
    """A failure to report on stderr with an exit code."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class Lease:
    """One live lease as the store holds it."""

    key: str
    owner: str
    token: int
    left: float | None
    waiters: int | None  # None: the store does not record waiters


class Inspector(Protocol):
    """Reads and breaks leases of one store."""

    def leases(self) -> list[Lease]: ...
    def lease(self, key: str) -> Lease | None: ...
    def release(self, key: str, owner: str) -> bool: ...
    def close(self) -> None: ...


class RedisInspector:
    """The lock hashes `<prefix>:<key>` of one Redis server (`RedisLockStore`'s layout)."""

    def __init__(self, url: str, prefix: str) -> None:
        import redis

        from resilience.stores import RedisLockStore

        try:
            self._client = redis.Redis.from_url(url, socket_timeout=5, socket_connect_timeout=5)
        except ValueError as exc:
            msg = f"--redis: {_redact(url)!r} is not a Redis URL ({exc}); expected redis://host:port/db"
            raise CliError(msg, 2) from exc
        try:
            self._client.ping()
        except redis.RedisError as exc:
            self._client.close()
            msg = f"cannot reach Redis at {_redact(url)}: {exc}"
            raise CliError(msg) from exc
        self._prefix = prefix
        self._store = RedisLockStore(self._client, prefix=prefix)

    def _read(self, names: Sequence[bytes]) -> list[Lease]:
        from resilience.stores._redis import companions, live_waiters

        pipe = self._client.pipeline(transaction=False)
        pipe.time()
        for name in names:
            pipe.type(name)
        (seconds, micros), *types = pipe.execute()
        now_ms = seconds * 1000 + micros // 1000  # the server's clock, as the stores' scripts read it
        hashes = [name for name, kind in zip(names, types, strict=True) if kind in {b"hash", "hash"}]
        queues = [companions(name.decode("utf-8", "replace")) for name in hashes]
        for name, queue in zip(hashes, queues, strict=True):
            pipe.hmget(name, "owner", "token")
            pipe.pttl(name)
            # Waiters: the live entries of the key's fair queue (arrivals scored in server µs,
            # and the refreshed expiries of those that tried again); a key that cannot have a
            # queue (a `}` without a hash tag) answers placeholders.
            for queue_key in queue or (name, name):
                pipe.zrange(queue_key, 0, -1, withscores=True) if queue is not None else pipe.exists(queue_key)
        replies = pipe.execute()
        found = []
        start = len(self._prefix) + 1
        for index, (name, queue) in enumerate(zip(hashes, queues, strict=True)):
            (owner, token), pttl, arrivals, refreshed = replies[4 * index : 4 * index + 4]
            if owner is None or token is None:  # a released key's tombstone
                continue
            left = pttl / 1000 if pttl >= 0 else None
            key = name.decode("utf-8", "replace")[start:]
            waiters = None if queue is None else live_waiters(arrivals, refreshed, now_ms)
            found.append(Lease(key, owner.decode("utf-8", "replace"), int(token), left, waiters))
        return found

    def leases(self) -> list[Lease]:
        """Every held lock under the prefix (SCAN: safe on a busy server)."""
        pattern = _glob_escape(self._prefix) + ":*"
        names = list(self._client.scan_iter(match=pattern, count=1000))
        return sorted(self._read(names), key=lambda lease: lease.key)

    def lease(self, key: str) -> Lease | None:
        """The lock on `key`, if held."""
        found = self._read([self._store.key(key).encode()])
        return found[0] if found else None

    def release(self, key: str, owner: str) -> bool:
        """`owner`'s release through the store's own script (it wakes the waiters)."""
        return self._store.release(key, owner)

    def close(self) -> None:
        """Close the connection."""
        self._store.close()
        self._client.close()


class PostgresInspector:
    """The lock table of one PostgreSQL database (`PostgresLockStore`'s layout)."""

    def __init__(self, dsn: str, table: str) -> None:
        import psycopg

        from resilience.exceptions import ValidationError
        from resilience.stores import PostgresLockStore
        from resilience.stores._postgres_sql import LockSql

        try:
            given = psycopg.conninfo.conninfo_to_dict(dsn)
        except psycopg.ProgrammingError as exc:
            msg = (
                f"--postgres: {_redact(dsn)!r} is not a PostgreSQL DSN ({exc}); expected postgresql://user@host:port/db"
            )
            raise CliError(msg, 2) from exc
        try:
            self._store = PostgresLockStore(dsn, table=table)
        except ValidationError as exc:
            raise CliError(f"--table: {exc}", 2) from exc
        self._sql = LockSql(table)
        try:
            # An operator's tool should not hang: 5 s unless the DSN names its own connect_timeout.
            timeout: dict[str, Any] = {} if "connect_timeout" in given else {"connect_timeout": 5}
            self._conn = psycopg.connect(dsn, autocommit=True, **timeout)
        except psycopg.Error as exc:
            msg = f"cannot reach PostgreSQL at {_redact(dsn)}: {exc}".strip()
            raise CliError(msg) from exc
        self._psycopg = psycopg

    def _rows(self, query: str, params: Sequence[Any]) -> list[Lease]:
        try:
            rows = self._conn.execute(query, params).fetchall()
        except self._psycopg.errors.UndefinedTable as exc:
            msg = f"no lock table {self._sql.table!r} in this database (PostgresLockStore.create_schema() makes it)"
            raise CliError(msg) from exc
        return [Lease(key, owner, int(token), left_ms / 1000, None) for key, owner, token, left_ms in rows]

    def leases(self) -> list[Lease]:
        """Every held lock of the table."""
        return self._rows(self._sql.leases, ())

    def lease(self, key: str) -> Lease | None:
        """The lock on `key`, if held."""
        found = self._rows(self._sql.lease, (key,))
        return found[0] if found else None

    def release(self, key: str, owner: str) -> bool:
        """`owner`'s release through the store's own statement (it notifies the waiters)."""
        return self._store.release(key, owner)

    def close(self) -> None:
        """Close the connections."""
        self._conn.close()
        self._store.close()


def _glob_escape(text: str) -> str:
    return "".join("\\" + char if char in "*?[]\\" else char for char in text)


def _printable(text: str) -> str:
    r"""`text` safe for a terminal line: unprintable characters and the backslash escaped.

    Keys and owners often carry request data: a newline would forge rows, an ANSI escape would
    rewrite the operator's terminal, a bidi override would reorder what is shown. Each such
    character (and `\` itself, so that the escaping is unambiguous) appears as in a Python
    string literal: `\n`, `\x1b`, `\u202e`, `\\`.
    """
    if text.isprintable() and "\\" not in text:
        return text
    return "".join(char if char.isprintable() and char != "\\" else repr(char)[1:-1] for char in text)


def _suffix(owner: str) -> str:
    return _printable(owner if len(owner) <= 12 else "…" + owner[-11:])


def _count(waiters: int | None) -> str:
    return "?" if waiters is None else str(waiters)


def _redact(url: str) -> str:
    """`url` without its password (error messages end up in logs)."""
    parts = urllib.parse.urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return urllib.parse.urlunsplit(parts._replace(netloc=netloc))


def _seconds(left: float | None) -> str:
    return "?" if left is None else f"{left:.3f}s"


def _table(leases: Sequence[Lease]) -> str:
    rows = [("KEY", "TOKEN", "OWNER", "LEFT", "WAITERS")]
    rows += [
        (_printable(lease.key), str(lease.token), _suffix(lease.owner), _seconds(lease.left), _count(lease.waiters))
        for lease in leases
    ]
    widths = [max(len(row[column]) for row in rows) for column in range(5)]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip() for row in rows]
    return "\n".join(lines) + f"\n{len(leases)} held\n"


def _show(lease: Lease) -> str:
    waiters = "not recorded by this store" if lease.waiters is None else str(lease.waiters)
    return (
        f"key:     {_printable(lease.key)}\ntoken:   {lease.token}\nowner:   {_printable(lease.owner)}\n"
        f"left:    {_seconds(lease.left)}\nwaiters: {waiters}\n"
    )


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="resilience", description="Inspect resilience's distributed locks.")
    commands = parser.add_subparsers(dest="command", required=True)
    locks = commands.add_parser("locks", help="who holds which lock", description="Who holds which lock.")
    where = locks.add_mutually_exclusive_group(required=True)
    where.add_argument("--redis", metavar="URL", help="a RedisLockStore's server: redis://host:port/db")
    where.add_argument("--postgres", metavar="DSN", help="a PostgresLockStore's database: postgresql://...")
    locks.add_argument("--prefix", default="lock", help="the RedisLockStore prefix (default: lock)")
    locks.add_argument("--table", default="resilience_locks", help="the PostgresLockStore table")
    actions = locks.add_subparsers(dest="action", required=True)
    actions.add_parser("list", help="every held lock: key, token, owner suffix, time left, waiters")
    show = actions.add_parser("show", help="one lock in full")
    show.add_argument("key")
    release = actions.add_parser("release", help="break a lease (needs --force)")
    release.add_argument("key")
    release.add_argument("--force", action="store_true", help="yes, free the key whoever holds it")
    watch = actions.add_parser("watch", help="the list, refreshed until Ctrl-C")
    watch.add_argument("--interval", type=float, default=1.0, help="seconds between refreshes (default 1)")
    watch.add_argument("--count", type=int, default=None, help="stop after this many refreshes")
    return parser


def _inspector(args: argparse.Namespace) -> Inspector:
    if args.redis is not None:
        return RedisInspector(args.redis, args.prefix)
    return PostgresInspector(args.postgres, args.table)


def _release(inspector: Inspector, key: str, *, force: bool, out: TextIO) -> int:
    if not force:
        msg = f"refusing to release {key!r} without --force. {_FENCING}"
        raise CliError(msg, 2)
    lease = inspector.lease(key)
    if lease is None:
        raise CliError(f"{key!r} is not held")
    if not inspector.release(key, lease.owner):
        msg = f"{key!r} changed hands while releasing it; nothing was released (run show again)"
        raise CliError(msg)
    out.write(f"released {key!r} (token {lease.token}, owner {_printable(lease.owner)}). {_FENCING}\n")
    return 0


def _watch(inspector: Inspector, interval: float, count: int | None, out: TextIO) -> int:
    if not math.isfinite(interval) or interval <= 0:
        raise CliError("--interval: must be a positive number of seconds", 2)
    clear = "\x1b[H\x1b[2J" if out.isatty() else ""
    shown = 0
    while count is None or shown < count:
        if shown:
            time.sleep(interval)
        out.write(f"{clear}{time.strftime('%H:%M:%S')}\n{_table(inspector.leases())}")
        out.flush()
        shown += 1
    return 0


def run(argv: Sequence[str] | None = None, out: TextIO | None = None) -> int:
    """Run the command line `argv`; the exit code."""
    out = out or sys.stdout
    args = _parser().parse_args(argv)
    try:
        inspector = _inspector(args)
        try:
            if args.action == "list":
                out.write(_table(inspector.leases()))
                return 0
            if args.action == "show":
                lease = inspector.lease(args.key)
                if lease is None:
                    raise CliError(f"{args.key!r} is not held")
                out.write(_show(lease))
                return 0
            if args.action == "release":
                return _release(inspector, args.key, force=args.force, out=out)
            return _watch(inspector, args.interval, args.count, out)
        finally:
            inspector.close()
    except CliError as exc:
        sys.stderr.write(f"resilience: {exc}\n")
        return exc.code
    except KeyboardInterrupt:
        return 0


def main() -> None:
    """The console script `resilience`."""
    sys.exit(run())
