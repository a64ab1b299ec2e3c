"""Shared and exclusive holds across real processes (PostgreSQL and Redis stores), with holders killed and stopped.

Four processes take one key again and again, shared or exclusive at random; a holder of each
mode is SIGKILLed inside its hold, and an exclusive one is SIGSTOPped past its ttl, then resumed
and writes anyway. The checker reads every section (the server's clock at entry and exit) and
the fenced resource: no exclusive section overlaps any other section, no live holder is refused
by the resource, tokens order the sections, and the stale write is refused.
"""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psycopg
import pytest

from resilience.stores import PostgresLockStore

if TYPE_CHECKING:
    from collections.abc import Iterator

    from tests.postgres_support import PostgresServer

pytestmark = pytest.mark.postgres

ROOT = Path(__file__).resolve().parents[2]
TTL = 1.0
MIXED = 4
SCHEMA = """
CREATE TABLE IF NOT EXISTS rw_resource (key text PRIMARY KEY, w bigint NOT NULL, m bigint NOT NULL);
CREATE TABLE IF NOT EXISTS rw_log (key text, name text, shared boolean, token bigint, started bigint, ended bigint,
                                   accepted boolean, lost boolean);
CREATE TABLE IF NOT EXISTS rw_inside (key text, name text);
CREATE TABLE IF NOT EXISTS rw_stop (key text);
"""


@dataclass
class Section:
    name: str
    shared: bool
    token: int
    started: int
    ended: int
    accepted: bool
    lost: bool


@pytest.fixture(params=["postgres", pytest.param("redis", marks=pytest.mark.redis)])
def rw_db(request: pytest.FixtureRequest, postgres_server: PostgresServer) -> Iterator[tuple[str, str, Any, list[str]]]:
    """The resource's database, the lock table (or Redis prefix), a connection, and the store's extra worker argument."""
    dsn = postgres_server.dsn
    table = f"rwp_{uuid.uuid4().hex[:8]}"
    extra: list[str] = []
    if request.param == "redis":
        extra = [str(request.getfixturevalue("redis_server").port)]
    else:
        with PostgresLockStore(dsn, table=table) as store:
            store.create_schema()
    conn = psycopg.connect(dsn, autocommit=True)
    conn.execute(SCHEMA)
    yield dsn, table, conn, extra
    conn.close()


def _inside(conn: Any, key: str, name: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while conn.execute("SELECT 1 FROM rw_inside WHERE key = %s AND name = %s", (key, name)).fetchone() is None:
        assert time.monotonic() < deadline, f"{name} never got in"
        time.sleep(0.02)


def _sections(conn: Any, key: str) -> list[Section]:
    rows = conn.execute(
        "SELECT name, shared, token, started, ended, accepted, lost FROM rw_log WHERE key = %s ORDER BY started",
        (key,),
    ).fetchall()
    return [Section(*row) for row in rows]


def check(sections: list[Section]) -> list[str]:
    """Every rule of a read-write lock with fencing that the sections can break."""
    problems = []
    live = [s for s in sections if not s.lost]
    for a, b in itertools.combinations(live, 2):
        if (not a.shared or not b.shared) and a.started < b.ended and b.started < a.ended:
            problems.append(f"overlap: {a} / {b}")
        first, later = (a, b) if a.ended <= b.started else (b, a) if b.ended <= a.started else (None, None)
        ordered = first is not None and later is not None and (not first.shared or not later.shared)
        if ordered and later.token <= first.token:  # type: ignore[union-attr]
            problems.append(f"token did not increase: {first} -> {later}")
    problems += [f"a live holder was refused by the resource: {s}" for s in live if not s.accepted]
    return problems


@pytest.mark.timeout(240)
def test_readers_and_writers_across_processes_with_holders_killed_and_stopped(
    rw_db: tuple[str, str, Any, list[str]],
) -> None:
    dsn, table, conn, extra = rw_db
    key = f"doc-{uuid.uuid4().hex[:8]}"
    conn.execute("INSERT INTO rw_resource (key, w, m) VALUES (%s, 0, 0)", (key,))
    processes: list[subprocess.Popen[bytes]] = []

    def start(name: str, role: str) -> subprocess.Popen[bytes]:
        args = [
            sys.executable,
            "-m",
            "tests.reliability.rw_worker",
            dsn,
            table,
            key,
            name,
            role,
            "2000",
            str(TTL),
            *extra,
        ]
        process = subprocess.Popen(args, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
        processes.append(process)
        return process

    try:
        writer_victim = start("killed-writer", "stay-exclusive")
        _inside(conn, key, "killed-writer")
        mixed = [start(f"m{n}", "mixed") for n in range(MIXED)]
        time.sleep(1.0)  # they queue behind the victim
        writer_victim.kill()
        reader_victim = start("killed-reader", "stay-shared")
        _inside(conn, key, "killed-reader")
        reader_victim.kill()
        stale = start("stale-writer", "stale-writer")
        _inside(conn, key, "stale-writer")
        os.kill(stale.pid, signal.SIGSTOP)
        try:
            time.sleep(TTL + 2.0)  # its lease expires; the others go on
        finally:
            os.kill(stale.pid, signal.SIGCONT)
        assert stale.wait(timeout=60) == 0
        time.sleep(1.0)
        conn.execute("INSERT INTO rw_stop (key) VALUES (%s)", (key,))
        for process in mixed:
            assert process.wait(timeout=120) == 0
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
            process.wait(timeout=10)
    sections = _sections(conn, key)
    names = {s.name for s in sections}
    assert "killed-writer" not in names
    assert "killed-reader" not in names
    live = [s for s in sections if not s.lost]
    assert sum(s.shared for s in live) >= 10
    assert sum(not s.shared for s in live) >= 5
    assert check(sections) == []
    (stale_section,) = [s for s in sections if s.name == "stale-writer"]
    assert stale_section.accepted is False  # 0 stale writes accepted
    assert any(s.started > stale_section.started and s.name != "stale-writer" for s in live)
    overlapping = [(a, b) for a, b in itertools.combinations(live, 2) if a.started < b.ended and b.started < a.ended]
    assert overlapping  # readers did hold together


def test_the_checker_finds_an_overlap_a_refused_holder_and_a_token_out_of_order() -> None:
    """The checker is not blind."""
    reader = Section("r", True, 5, 0, 10, True, False)
    writer = Section("w", False, 6, 5, 8, True, False)
    assert any(p.startswith("overlap") for p in check([reader, writer]))
    refused = Section("x", True, 7, 20, 30, False, False)
    assert any("refused" in p for p in check([refused]))
    older = Section("y", False, 3, 40, 50, True, False)
    assert any("token" in p for p in check([Section("x", True, 7, 20, 30, True, False), older]))
    assert check([reader, Section("r2", True, 4, 2, 12, True, False)]) == []
