"""Process and server faults with the PostgreSQL lock store: real processes, a real server restart.

- a holder paused (SIGSTOP) past its ttl is fenced off by the next holder's larger token;
- a crash and restart of PostgreSQL loses neither the token order nor a held lease;
- a killed holder's lease frees within its ttl.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psycopg
import pytest

from resilience import ResiliencePipelineBuilder, get_lock_token
from resilience.stores import PostgresLockStore

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from tests.postgres_support import PostgresServer

pytestmark = [pytest.mark.postgres, pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")]

ROOT = Path(__file__).parent.parent.parent

# A holder in its own process: it takes `key` through the primitive (renewed in the background),
# prints its token, waits for a line on stdin, then writes to the fenced resource with its token.
_HOLDER = textwrap.dedent(
    """
    import sys
    import psycopg
    from resilience import LockLeaseLostError
    from resilience.primitives import lock
    from resilience.stores import PostgresLockStore

    dsn, table, key, ttl = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
    locks = lock(PostgresLockStore(dsn, table=table), ttl=ttl)

    def body(handle):
        print("token", handle.token, flush=True)
        sys.stdin.readline()
        with psycopg.connect(dsn, autocommit=True) as conn:
            written = conn.execute(
                "UPDATE fenced SET token = %s, writes = writes + 1 WHERE id = %s AND token < %s",
                (handle.token, key, handle.token),
            ).rowcount
        print("written", written, flush=True)

    try:
        locks.run(key, body)
        print("returned", flush=True)
    except LockLeaseLostError:
        print("lost", flush=True)
    """
)


@pytest.fixture
def holder(postgres_dsn: str) -> Iterator[Callable[[str, float], subprocess.Popen[str]]]:
    started: list[subprocess.Popen[str]] = []

    def start(key: str, ttl: float) -> subprocess.Popen[str]:
        process = subprocess.Popen(
            [sys.executable, "-c", _HOLDER, postgres_dsn, "resilience_locks", key, str(ttl)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            cwd=ROOT,
        )
        started.append(process)
        return process

    yield start
    for process in started:
        if process.poll() is None:
            process.send_signal(signal.SIGCONT)
            process.kill()
        process.wait(10)
        for stream in (process.stdin, process.stdout):
            if stream is not None:
                stream.close()


def _token_of(process: subprocess.Popen[str]) -> int:
    assert process.stdout is not None
    line = process.stdout.readline().split()
    assert line[0] == "token", line
    return int(line[1])


def test_a_paused_holder_is_fenced_off(postgres_dsn: str, holder: Any) -> None:
    """SIGSTOP past the ttl: the next holder gets a larger token, and the stale write is refused."""
    key = uuid.uuid4().hex
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS fenced (id text PRIMARY KEY, token bigint, writes int)")
        conn.execute("INSERT INTO fenced VALUES (%s, 0, 0)", (key,))
    process = holder(key, 0.6)
    stale = _token_of(process)
    os.kill(process.pid, signal.SIGSTOP)
    time.sleep(1.0)  # past the ttl: the renewals could not run

    with PostgresLockStore(postgres_dsn) as store:
        fresh = store.acquire(key, "next-holder", 30)
        assert fresh is not None
        assert fresh > stale
        with psycopg.connect(postgres_dsn, autocommit=True) as conn:
            assert (
                conn.execute("UPDATE fenced SET token = %s WHERE id = %s AND token < %s", (fresh, key, fresh)).rowcount
                == 1
            )

        os.kill(process.pid, signal.SIGCONT)
        assert process.stdin is not None
        process.stdin.write("go\n")
        process.stdin.flush()
        assert process.stdout is not None
        assert process.stdout.readline().split() == ["written", "0"]  # the stale holder's write is refused
        assert process.stdout.readline().strip() == "lost"  # and it learns that its lease is gone
        assert store.renew(key, "next-holder", 30)  # the new holder was never disturbed
    with psycopg.connect(postgres_dsn) as conn:
        assert conn.execute("SELECT token, writes FROM fenced WHERE id = %s", (key,)).fetchone() == (fresh, 0)


def test_a_killed_holders_lease_frees_within_its_ttl(postgres_dsn: str, holder: Any) -> None:
    """SIGKILL: no release is sent; a waiter gets the key once the ttl has run out, not later."""
    key = uuid.uuid4().hex
    ttl = 0.8
    process = holder(key, ttl)
    token = _token_of(process)
    process.kill()
    killed = time.monotonic()
    with PostgresLockStore(postgres_dsn) as store:
        pipeline = ResiliencePipelineBuilder().add_lock(key, ttl=5, wait=10, store=store).build()
        taken = pipeline.execute(get_lock_token)
    waited = time.monotonic() - killed
    assert taken is not None
    assert taken > token
    assert waited <= ttl + 1.5  # the ttl, plus the last renewal's head start and a loaded machine's slack


def _retrying(call: Callable[[], Any], *, attempts: int = 20) -> Any:
    """Call until the pool has replaced its connections broken by the restart."""
    for _ in range(attempts - 1):
        try:
            return call()
        except psycopg.OperationalError:
            time.sleep(0.1)
    return call()


def test_a_server_restart_loses_no_token_order_and_no_lease(fresh_postgres_server: PostgresServer) -> None:
    """A clean restart, then a crash (immediate stop: recovery from the log): tokens only increase, leases stay."""
    store = PostgresLockStore(fresh_postgres_server.dsn)
    store.create_schema()
    last = 0
    for mode in ("fast", "immediate"):
        for owner in ("a", "b", "c"):
            token = _retrying(lambda owner=owner: store.acquire("k", owner, 30))
            assert token is not None
            assert token > last
            last = token
            assert store.release("k", owner)
        held = store.acquire(f"held-{mode}", "holder", 60)
        assert held is not None

        fresh_postgres_server.restart(mode)

        after = _retrying(lambda: store.acquire("k", "d", 30))
        assert after is not None
        assert after > max(last, held)
        assert store.release("k", "d")
        assert _retrying(lambda mode=mode: store.acquire(f"held-{mode}", "someone", 30)) is None  # it survived
        assert _retrying(lambda mode=mode: store.renew(f"held-{mode}", "holder", 60)) is True
        last = after
    store.close()
