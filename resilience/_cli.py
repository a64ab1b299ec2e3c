"""`python -m resilience locks ...` (console script `resilience`): who holds which lock.

    resilience locks --redis redis://host:6379/0 list
    resilience locks --postgres postgresql://app@db/app show order:42
    resilience locks --redis redis://host release order:42 --force
    resilience locks --postgres postgresql://app@db/app watch

It finds the held keys in the stores' own layout (Redis hashes `<prefix>:<key>`, the
PostgreSQL lock table); who holds them, and breaking them, are the stores' inspection
capability (`SupportsInspection`: `info`, `force_release`), as `lock(...).info` uses it. Exit
codes: 0 done, 1 the key is not held or the server failed, 2 bad arguments (including a URL or
DSN that cannot be parsed).
"""

from __future__ import annotations

import argparse
import itertools
import math
import sys
import time
import urllib.parse
from typing import TYPE_CHECKING, Any, TypeAlias

if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import TextIO

    from resilience.stores import LockInfo

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
        self.store = RedisLockStore(self._client, prefix=prefix)
        self.errors: tuple[type[Exception], ...] = (redis.RedisError,)

    def held_keys(self) -> list[str]:
        """The keys of the lock hashes under the prefix (SCAN: safe on a busy server), in order.

        Other data under the prefix is skipped; a released lock's tombstone is skipped by `info`.
        """
        pattern = "".join("\\" + char if char in "*?[]\\" else char for char in self._prefix)  # glob-escaped
        names = list(self._client.scan_iter(match=pattern + ":*", count=1000))
        pipe = self._client.pipeline(transaction=False)
        for name in names:
            pipe.type(name)
        start = len(self._prefix) + 1
        kinds = pipe.execute()
        return sorted(
            name.decode("utf-8", "replace")[start:] for name, kind in zip(names, kinds, strict=True) if kind == b"hash"
        )

    def close(self) -> None:
        """Close the connection."""
        self.store.close()
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
            self.store = PostgresLockStore(dsn, table=table)
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
        self.errors: tuple[type[Exception], ...] = (psycopg.Error,)
        self._missing_table = psycopg.errors.UndefinedTable

    def held_keys(self) -> list[str]:
        """The keys with a live lease, in order."""
        try:
            return [key for (key,) in self._conn.execute(self._sql.held_keys).fetchall()]
        except self._missing_table as exc:
            msg = f"no lock table {self._sql.table!r} in this database (PostgresLockStore.create_schema() makes it)"
            raise CliError(msg) from exc

    def close(self) -> None:
        """Close the connections."""
        self._conn.close()
        self.store.close()


# An inspector finds the held keys of one store (`held_keys`); its `store` tells who holds them
# and breaks them; its `errors` are what the store's client raises when the server fails
# (reported in one line, exit code 1).
Inspector: TypeAlias = "RedisInspector | PostgresInspector"


def _held(inspector: Inspector) -> list[LockInfo]:
    """Every held lock, as its store tells it."""
    return [info for key in inspector.held_keys() if (info := inspector.store.info(key)) is not None]


def _printable(text: str) -> str:
    r"""`text` safe for a terminal line: unprintable characters and the backslash escaped.

    Keys and owners often carry request data: a newline would forge rows, an ANSI escape would
    rewrite the operator's terminal, a bidi override would reorder what is shown. Each such
    character (and `\` itself, so that the escaping is unambiguous) appears as in a Python
    string literal: `\n`, `\x1b`, `\u202e`, `\\`.
    """
    return "".join(char if char.isprintable() and char != "\\" else repr(char)[1:-1] for char in text)


def _redact(url: str) -> str:
    """`url` without its password (error messages end up in logs)."""
    parts = urllib.parse.urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return urllib.parse.urlunsplit(parts._replace(netloc=netloc))


def _seconds(left: float | None) -> str:
    return "?" if left is None else f"{left:.3f}s"


def _table(found: Sequence[LockInfo]) -> str:
    rows = [("KEY", "TOKEN", "OWNER", "LEFT", "WAITERS")]
    rows += [
        (
            _printable(info.key),
            str(holder.token),
            _printable(holder.owner if len(holder.owner) <= 12 else "…" + holder.owner[-11:]),
            _seconds(holder.expires_in),
            "?" if info.waiters is None else str(info.waiters),
        )
        for info in found
        for holder in info.holders
    ]
    widths = [max(len(row[column]) for row in rows) for column in range(5)]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip() for row in rows]
    return "\n".join(lines) + f"\n{len(found)} held\n"


def _show(info: LockInfo) -> str:
    waiters = "not recorded by this store" if info.waiters is None else str(info.waiters)
    holders = "".join(
        f"token:   {holder.token}\nowner:   {_printable(holder.owner)}\nleft:    {_seconds(holder.expires_in)}\n"
        for holder in info.holders
    )
    return f"key:     {_printable(info.key)}\nmode:    {info.mode}\n{holders}waiters: {waiters}\n"


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


def _release(inspector: Inspector, key: str, *, force: bool, out: TextIO) -> None:
    if not force:
        msg = f"refusing to release {key!r} without --force. {_FENCING}"
        raise CliError(msg, 2)
    info = inspector.store.info(key)
    if info is None or not inspector.store.force_release(key):
        raise CliError(f"{key!r} is not held")
    holders = "; ".join(f"token {holder.token}, owner {_printable(holder.owner)}" for holder in info.holders)
    out.write(f"released {key!r} ({holders}). {_FENCING}\n")


def _watch(inspector: Inspector, interval: float, count: int | None, out: TextIO) -> None:
    if not math.isfinite(interval) or interval <= 0:
        raise CliError("--interval: must be a positive number of seconds", 2)
    clear = "\x1b[H\x1b[2J" if out.isatty() else ""
    for shown in itertools.count() if count is None else range(count):
        if shown:
            time.sleep(interval)
        out.write(f"{clear}{time.strftime('%H:%M:%S')}\n{_table(_held(inspector))}")
        out.flush()


def run(argv: Sequence[str] | None = None, out: TextIO | None = None) -> int:
    """Run the command line `argv`; the exit code."""
    out = out or sys.stdout
    args = _parser().parse_args(argv)
    try:
        redis = args.redis is not None
        inspector: Inspector = (
            RedisInspector(args.redis, args.prefix) if redis else PostgresInspector(args.postgres, args.table)
        )
        try:
            _act(inspector, args, out)
        except inspector.errors as exc:
            raise CliError(" ".join([str(exc).strip(), *getattr(exc, "__notes__", ())])) from exc
        finally:
            inspector.close()
    except CliError as exc:
        sys.stderr.write(f"resilience: {exc}\n")
        return exc.code
    except KeyboardInterrupt:
        pass
    return 0


def _act(inspector: Inspector, args: argparse.Namespace, out: TextIO) -> None:
    if args.action == "list":
        out.write(_table(_held(inspector)))
    elif args.action == "show":
        info = inspector.store.info(args.key)
        if info is None:
            raise CliError(f"{args.key!r} is not held")
        out.write(_show(info))
    elif args.action == "release":
        _release(inspector, args.key, force=args.force, out=out)
    else:
        _watch(inspector, args.interval, args.count, out)


def main() -> None:
    """The console script `resilience`."""
    sys.exit(run())
