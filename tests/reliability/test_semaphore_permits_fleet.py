"""Semaphore permits across 3 processes x 3 threads, a holder SIGKILLed mid-body (Redis, PostgreSQL).

Each body takes 1, 2 or 3 of 5 slots (`permits`) and records, on the Redis server's clock, when
it ran, with which token and how many permits. Checked: at no instant did the bodies holding
a valid lease have more than 5 permits between them — a body of the killed process counts from
its start until the earliest its lease can have expired (the kill + 2/3 ttl: it renewed at most
ttl/4 before), which under-counts it and so never fails the check wrongly; every token is
distinct (each holder has its own); and the others kept working after the killed holder's
lease ran out (its permits came back).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from typing import TYPE_CHECKING, Any

import pytest

from tests.reliability.conftest import ROOT
from tests.reliability.fencing import server_us

if TYPE_CHECKING:
    from tests.redis_support import RedisServer

pytestmark = [pytest.mark.redis, pytest.mark.slow]

LIMIT = 5
TTL = 1.5
SLACK = 2.0  # a loaded machine schedules the other workers late
SECONDS = 6.0


def _most_permits_at_once(intervals: list[tuple[int, int, int]]) -> tuple[int, int]:
    """The most permits held at one instant by the `(start, end, permits)` intervals, and when (server µs)."""
    # An end sorts before a start at the same instant (a negative change first): back to back is no overlap.
    events = sorted([(end, -permits) for _, end, permits in intervals] + [(start, p) for start, _, p in intervals])
    most = current = 0
    when = 0
    for instant, change in events:
        current += change
        if current > most:
            most, when = current, instant
    return most, when


def run(redis_port: int, client: Any, uid: str, postgres: str = "") -> None:
    log = f"permits:{uid}"
    args = [sys.executable, "-m", "tests.reliability.permit_worker", "--permits", "--port", str(redis_port)]
    args += ["--key", f"jobs:{uid}", "--log", log, "--limit", str(LIMIT), "--ttl", str(TTL)]
    args += ["--duration", str(SECONDS), "--postgres", postgres]
    workers = [subprocess.Popen(args, cwd=ROOT) for _ in range(3)]
    try:
        time.sleep(SECONDS / 4)  # the fleet is running
        killed = kill_at = None
        for _ in range(500):  # SIGKILL a process while one of its bodies holds slots
            candidates = [w for w in workers if client.exists(f"inside:{log}:{w.pid}")]
            if candidates:
                os.kill(candidates[0].pid, signal.SIGSTOP)  # hold it still while we look
                if client.exists(f"inside:{log}:{candidates[0].pid}"):
                    kill_at = server_us(client)
                    os.kill(candidates[0].pid, signal.SIGKILL)
                    killed = candidates[0]
                    break
                os.kill(candidates[0].pid, signal.SIGCONT)
            time.sleep(0.01)
        assert killed is not None, "no process was ever caught holding slots"
        assert kill_at is not None
        killed.wait(10)
        for worker in workers:
            if worker is not killed:
                assert worker.wait(timeout=SECONDS + 60) == 0
    finally:
        for worker in workers:
            if worker.poll() is None:
                worker.kill()
                worker.wait(10)

    records = [json.loads(line) for line in client.lrange(log, 0, -1)]
    starts = {r["token"]: r for r in records if r["kind"] == "start"}
    ends = {r["token"]: r for r in records if r["kind"] == "end"}
    assert len(ends) > 30, "too little work to judge"
    assert len(starts) == len([r for r in records if r["kind"] == "start"]), "two bodies ran on the same token"
    assert all(isinstance(token, int) and token > 0 for token in starts)

    earliest_expiry = kill_at + int(TTL * 2 / 3 * 1_000_000)
    valid: list[tuple[int, int, int]] = []
    for token, start in starts.items():
        end = ends.get(token)
        if end is None:  # the killed holder's body: its lease ran on, at least until the earliest expiry
            assert start["pid"] == killed.pid, start
            valid.append((start["start"], earliest_expiry, start["permits"]))
            continue
        if end["lost"]:
            continue  # told its slots were lost: no longer a valid holder (fencing stops its writes)
        valid.append((start["start"], end["end"], end["permits"]))
    most, when = _most_permits_at_once(valid)
    at_once = [interval for interval in valid if interval[0] <= when < interval[1]]
    assert most <= LIMIT, f"{most} permits held at once (server time {when}): {at_once}"
    assert most >= 3, f"the fleet never contended ({most} permits at most): the check proves nothing"
    assert any(r["start"] > kill_at + int((TTL + SLACK) * 1_000_000) for r in starts.values()), (
        "no body ran after the killed holder's lease ran out"
    )


def test_permits_never_exceed_the_limit_on_redis(redis_server: RedisServer, client: Any, uid: str) -> None:
    """6 s on Redis: never more than 5 permits held at once; the killed holder's slots come back."""
    run(redis_server.port, client, uid)


@pytest.mark.postgres
def test_permits_never_exceed_the_limit_on_postgres(
    redis_server: RedisServer, client: Any, uid: str, postgres_server: Any
) -> None:
    """The same fleet over `PostgresSemaphoreStore` (records still on the Redis server's clock)."""
    from resilience.stores import PostgresSemaphoreStore

    with PostgresSemaphoreStore(postgres_server.dsn) as store:
        store.create_schema()
    run(redis_server.port, client, uid, postgres=postgres_server.dsn)
