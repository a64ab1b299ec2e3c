"""`python -m resilience locks` against the test Redis and the test PostgreSQL.

The main flows run the command as a real subprocess (`python -m resilience` and the console
script); the remaining branches call `resilience._cli.run` in-process, where coverage sees them.
"""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
import threading
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import redis

from resilience import LockLostError, ResiliencePipelineBuilder, get_context
from resilience._cli import run
from resilience.stores import PostgresLockStore, RedisLockStore
from resilience.testing import capture_events

if TYPE_CHECKING:
    from collections.abc import Iterator

    from tests.postgres_support import PostgresServer
    from tests.redis_support import RedisServer

ROOT = Path(__file__).parent.parent


def _cli(*args: str, script: bool = False) -> subprocess.CompletedProcess[str]:
    command = [str(Path(sys.executable).parent / "resilience")] if script else [sys.executable, "-m", "resilience"]
    return subprocess.run(
        [*command, *args], capture_output=True, text=True, timeout=60, check=False, cwd=ROOT, env={**os.environ}
    )


class Target:
    """One store behind the CLI: its arguments and a store to take leases with."""

    def __init__(self, args: list[str], store: Any) -> None:
        self.args = args
        self.store = store


@pytest.fixture(params=["redis", "postgres"])
def target(request: pytest.FixtureRequest) -> Iterator[Target]:
    prefix = f"cli{uuid.uuid4().hex[:8]}"
    if request.param == "redis":
        server: RedisServer = request.getfixturevalue("redis_server")
        client = redis.Redis(host=server.host, port=server.port)
        store: Any = RedisLockStore(client, prefix=prefix)
        yield Target(["--redis", server.url, "--prefix", prefix], store)
        store.close()
        client.close()
        return
    pg: PostgresServer = request.getfixturevalue("postgres_server")
    table = f"{prefix}_locks"
    store = PostgresLockStore(pg.dsn, table=table)
    store.create_schema()
    yield Target(["--postgres", pg.dsn, "--table", table], store)
    store.close()


def test_list_show_release_as_a_subprocess(target: Target) -> None:
    """The operator's loop: list who holds what, show one, refuse a release without --force, then break it."""
    # Leases long enough to outlive four subprocesses that each start slowly on a loaded machine.
    held = target.store.acquire("order:42", "worker-1-0123456789abcdef", 300)
    assert target.store.acquire("order:7", "worker-2", 300) is not None
    assert target.store.acquire("gone", "worker-3", 30) is not None
    assert target.store.release("gone", "worker-3")
    queued = True  # every lock store keeps a fair queue per lock: waiters are counted

    @contextlib.contextmanager
    def waiters_in_queue() -> Iterator[None]:
        # A queue entry lives 3 s after its waiter's last attempt, and a subprocess can take
        # longer than that to start on a loaded machine: the two waiters attempt again every
        # 0.2 s for as long as the command runs, as live waiters do.
        if not queued:
            yield
            return
        stop = threading.Event()

        def attempt() -> None:
            assert target.store.acquire_or_queue("order:42", "waiter-a", 30)[0] is None
            assert target.store.acquire_or_queue("order:42", "waiter-b", 30)[0] is None

        def keep_attempting() -> None:
            while not stop.wait(0.2):
                attempt()

        attempt()
        thread = threading.Thread(target=keep_attempting)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join()

    with waiters_in_queue():
        listed = _cli("locks", *target.args, "list")
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.splitlines()
    assert lines[0].split() == ["KEY", "TOKEN", "OWNER", "LEFT", "WAITERS"]
    assert [line.split()[0] for line in lines[1:3]] == ["order:42", "order:7"]
    key, token, owner, left, waiters = lines[1].split()
    assert (key, int(token), owner, waiters) == ("order:42", held, "…56789abcdef", "2" if queued else "?")
    assert lines[2].split()[-1] == ("0" if queued else "?")
    assert 200 < float(left.rstrip("s")) <= 300  # the subprocess may start slowly on a loaded machine
    assert lines[-1] == "2 held"

    with waiters_in_queue():
        shown = _cli("locks", *target.args, "show", "order:42", script=True)
    assert shown.returncode == 0, shown.stderr
    assert f"token:   {held}" in shown.stdout
    assert "mode:    exclusive" in shown.stdout
    assert "owner:   worker-1-0123456789abcdef" in shown.stdout
    assert ("waiters: 2" if queued else "waiters: not recorded by this store") in shown.stdout

    refused = _cli("locks", *target.args, "release", "order:42")
    assert refused.returncode == 2
    assert "without --force" in refused.stderr
    assert "fencing" in refused.stderr
    assert target.store.acquire("order:42", "someone", 30) is None

    if queued:  # the waiters give up (leave the queue), so that the key is free for anyone
        assert not target.store.release("order:42", "waiter-a")
        assert not target.store.release("order:42", "waiter-b")
    forced = _cli("locks", *target.args, "release", "order:42", "--force")
    assert forced.returncode == 0, forced.stderr
    assert "fencing" in forced.stdout
    after = target.store.acquire("order:42", "someone", 30)
    assert after is not None
    assert after > held
    assert target.store.renew("order:42", "worker-1-0123456789abcdef", 30) is False  # the stale holder is out


def test_missing_keys_and_bad_addresses_exit_non_zero() -> None:
    """Not held: 1; a URL that is not one: 2; nothing listening: 1; each with a message."""
    not_redis = _cli("locks", "--redis", "http://example.invalid", "list")
    assert not_redis.returncode == 2
    assert "is not a Redis URL" in not_redis.stderr
    unreachable = _cli("locks", "--postgres", "postgresql://u:hunter2@127.0.0.1:1/db", "list")
    assert unreachable.returncode == 1
    assert "cannot reach PostgreSQL" in unreachable.stderr
    assert "hunter2" not in unreachable.stderr
    usage = _cli("locks", "list")
    assert usage.returncode == 2
    assert "--redis" in usage.stderr


def test_watch_refreshes(target: Target) -> None:
    """`watch` prints the list again every interval (here twice, then stops)."""
    assert target.store.acquire("job", "w", 30) is not None
    out = io.StringIO()
    assert run(["locks", *target.args, "watch", "--interval", "0.05", "--count", "2"], out) == 0
    assert out.getvalue().count("KEY  ") == 2
    assert out.getvalue().count("\njob ") == 2


def test_show_and_release_of_a_free_key(target: Target, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["locks", *target.args, "show", "nothing"], io.StringIO()) == 1
    assert "'nothing' is not held" in capsys.readouterr().err
    assert run(["locks", *target.args, "release", "nothing", "--force"], io.StringIO()) == 1


def test_show_and_list_give_the_mode_and_every_shared_holder(target: Target) -> None:
    """A key held shared: `show` says mode shared and lists each holder; `list` has a row per holder;
    `release --force` breaks them all."""
    first = target.store.acquire_shared("doc", "reader-1", 30)
    second = target.store.acquire_shared("doc", "reader-2", 30)
    assert first is not None
    assert second is not None
    out = io.StringIO()
    assert run(["locks", *target.args, "show", "doc"], out) == 0
    shown = out.getvalue()
    assert "mode:    shared" in shown
    assert "reader-1" in shown
    assert "reader-2" in shown
    listed = io.StringIO()
    assert run(["locks", *target.args, "list"], listed) == 0
    assert sum(line.split()[0] == "doc" for line in listed.getvalue().splitlines()[1:] if line.strip()) == 2
    assert run(["locks", *target.args, "release", "doc", "--force"], io.StringIO()) == 0
    assert target.store.renew("doc", "reader-1", 30) is False
    assert target.store.renew("doc", "reader-2", 30) is False
    assert target.store.acquire("doc", "writer", 30) is not None


def test_release_breaks_the_key_whoever_holds_it_now(target: Target, capsys: pytest.CaptureFixture[str]) -> None:
    """`release --force` is the store's `force_release`: the holder read just before is named, and broken."""
    assert target.store.acquire("k", "first", 30) is not None
    out = io.StringIO()
    assert run(["locks", *target.args, "release", "k", "--force"], out) == 0
    assert "owner first)" in out.getvalue()
    assert target.store.renew("k", "first", 30) is False
    assert target.store.info("k") is None
    assert run(["locks", *target.args, "release", "k", "--force"], io.StringIO()) == 1
    assert "'k' is not held" in capsys.readouterr().err


def test_a_server_error_is_one_line_and_exit_code_1(target: Target, capsys: pytest.CaptureFixture[str]) -> None:
    """A store that fails mid-command (here: its table dropped, or a key of another type) gets a message, not a traceback."""
    if target.args[0] == "--redis":
        client = redis.Redis.from_url(target.args[1])
        client.set(target.store.key("plain"), "x")
        client.close()
    else:
        import psycopg

        with psycopg.connect(target.args[1], autocommit=True) as conn:
            conn.execute(f"DROP TABLE {target.args[3]}")
    assert run(["locks", *target.args, "show", "plain"], io.StringIO()) == 1
    assert capsys.readouterr().err.startswith("resilience: ")


def test_bad_arguments(postgres_server: PostgresServer, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["locks", "--postgres", postgres_server.dsn, "--table", "Bad Name", "list"], io.StringIO()) == 2
    assert "--table" in capsys.readouterr().err
    assert run(["locks", "--postgres", postgres_server.dsn, "--table", "no_such_table", "list"], io.StringIO()) == 1
    assert "create_schema" in capsys.readouterr().err
    assert run(["locks", "--postgres", "host=x port", "list"], io.StringIO()) == 2
    assert "is not a PostgreSQL DSN" in capsys.readouterr().err
    assert run(["locks", "--postgres", postgres_server.dsn, "watch", "--interval", "0"], io.StringIO()) == 2
    assert run(["locks", "--redis", "redis://:pw@127.0.0.1:1/0", "list"], io.StringIO()) == 1
    err = capsys.readouterr().err
    assert "cannot reach Redis at redis://:***@127.0.0.1:1/0" in err


def test_ctrl_c_ends_watch_quietly(postgres_server: PostgresServer, monkeypatch: pytest.MonkeyPatch) -> None:
    from resilience import _cli

    def interrupted(*args: Any) -> int:
        raise KeyboardInterrupt

    monkeypatch.setattr(_cli, "_watch", interrupted)
    assert run(["locks", "--postgres", postgres_server.dsn, "watch"], io.StringIO()) == 0


def test_redis_keys_that_are_not_locks_are_skipped(redis_server: RedisServer) -> None:
    """Other data under the prefix (a string, a tombstone hash, the glob characters in a prefix) is not listed."""
    prefix = f"we*ird{uuid.uuid4().hex[:6]}"
    client = redis.Redis(host=redis_server.host, port=redis_server.port)
    client.set(f"{prefix}:plain", "x")
    client.hset(f"{prefix}:tomb", "token", 5)
    client.hset(f"{prefix}x:other", mapping={"owner": "o", "token": 1})
    store = RedisLockStore(client, prefix=prefix)
    assert store.acquire("real", "o", 30) is not None
    out = io.StringIO()
    assert run(["locks", "--redis", redis_server.url, "--prefix", prefix, "list"], out) == 0
    assert [line.split()[0] for line in out.getvalue().splitlines()[1:-1]] == ["real"]
    client.persist(store.key("real"))
    out = io.StringIO()
    assert run(["locks", "--redis", redis_server.url, "--prefix", prefix, "show", "real"], out) == 0
    assert "left:    ?" in out.getvalue()
    store.close()
    client.close()


FORGED_KEY = "evil\nbilling:42  1  …worker  30.000s  0\x1b[2J\u202e"
HOSTILE_OWNER = "owner\n\x1b]0;pwned\x07\u202e-0123456789"


def test_keys_and_owners_are_printed_escaped(target: Target) -> None:
    """A key or owner carrying a newline, ANSI escapes or a bidi override forges no row and no escape.

    `list`, `show`, `watch` and `release` print them as Python literals would (a newline as `\\n`).
    """
    assert target.store.acquire(FORGED_KEY, HOSTILE_OWNER, 30) is not None
    shown_key = "evil\\nbilling:42  1  …worker  30.000s  0\\x1b[2J\\u202e"

    def no_raw(text: str) -> None:
        assert "\x1b" not in text
        assert "\u202e" not in text
        assert "\x07" not in text

    listed = io.StringIO()
    assert run(["locks", *target.args, "list"], listed) == 0
    no_raw(listed.getvalue())
    lines = listed.getvalue().splitlines()
    assert lines[-1] == "1 held"
    assert len(lines) == 3  # the header, one row, the count: no forged row
    assert lines[1].startswith(shown_key)
    assert "billing:42" not in "\n".join(line for line in lines if not line.startswith("evil"))

    shown = io.StringIO()
    assert run(["locks", *target.args, "show", FORGED_KEY], shown) == 0
    no_raw(shown.getvalue())
    assert f"key:     {shown_key}\n" in shown.getvalue()
    assert "owner:   owner\\n\\x1b]0;pwned\\x07\\u202e-0123456789\n" in shown.getvalue()

    watched = io.StringIO()
    assert run(["locks", *target.args, "watch", "--interval", "0.01", "--count", "1"], watched) == 0
    no_raw(watched.getvalue())
    assert shown_key in watched.getvalue()

    released = io.StringIO()
    assert run(["locks", *target.args, "release", FORGED_KEY, "--force"], released) == 0
    no_raw(released.getvalue())
    assert "owner owner\\n\\x1b]0;pwned\\x07\\u202e-0123456789)" in released.getvalue()
    assert len(released.getvalue().splitlines()) == 1


def test_a_force_released_pipeline_holder_is_told_and_still_returns(target: Target) -> None:
    """docs/cli.md: not interrupted; its next renewal aborts its signal; `execute` returns the value."""
    pipeline = ResiliencePipelineBuilder().add_lock("job", ttl=1.5, store=target.store).build()

    def body() -> tuple[str, type[BaseException] | None]:
        context = get_context()
        assert context is not None
        assert run(["locks", *target.args, "release", "job", "--force"], io.StringIO()) == 0
        assert context.signal.wait(10)  # told by its next renewal (every 0.5 s), not interrupted
        reason = context.signal.reason
        return "finished", None if reason is None else type(reason)

    with capture_events() as events:
        assert pipeline.execute(body) == ("finished", LockLostError)
    assert "OnLockLost" in [event.name for event in events]
