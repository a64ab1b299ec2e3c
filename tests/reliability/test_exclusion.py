"""Exclusion with fencing: worker processes contend on a few keys; the checker proves no overlap.

See `fencing.py` for how overlap is judged (server `TIME` inside the critical section and an
in-server gauge; fenced writes for the tokens).
"""

from __future__ import annotations

import os
import random
import signal
import time
from typing import TYPE_CHECKING, Any

import pytest

from tests.reliability.fencing import Checker, Record
from tests.reliability.worker import VIA_NAMES

if TYPE_CHECKING:
    from tests.redis_support import RedisServer
    from tests.reliability.conftest import Workers

pytestmark = pytest.mark.redis


def _run(
    redis_server: RedisServer,
    client: Any,
    workers: Workers,
    uid: str,
    *,
    processes: int,
    threads: int,
    duration: float,
    via: str,
) -> tuple[list[Record], list[str]]:
    keys = [f"{uid}-k{i}" for i in range(3)]
    log = f"log:{uid}"
    started = [
        workers.start(
            "contend",
            port=redis_server.port,
            keys=",".join(keys),
            log=log,
            threads=threads,
            duration=duration,
            ttl=2.0,
            wait=10.0,
            via=via,
        )
        for _ in range(processes)
    ]
    for process in started:
        assert process.wait(timeout=duration + 60) == 0, process.stderr.read().decode() if process.stderr else ""
    records = [Record.loads(line) for line in client.lrange(log, 0, -1)]
    checker = Checker(records)
    problems = checker.check(client, keys)
    accepted = sum(checker.accepted_count(client, key) for key in keys)
    rejected = sum(checker.rejected_count(client, key) for key in keys)
    refused = sum(int(n) for n in client.lrange(f"{log}:rejected", 0, -1))
    print(  # noqa: T201 -- the soak's totals
        f"\n{via}: {processes}x{threads} workers, {duration}s: {len(records)} critical sections, {accepted} accepted writes, {rejected} rejected, {refused} LockNotAcquired"
    )
    return records, problems


@pytest.mark.parametrize("via", VIA_NAMES)
@pytest.mark.timeout(180)
def test_processes_never_overlap_and_tokens_fence(
    redis_server: RedisServer, client: Any, workers: Workers, uid: str, via: str
) -> None:
    """4 processes x 2 threads on 3 keys for ~8 s: no overlap, tokens increase, no live write rejected."""
    records, problems = _run(redis_server, client, workers, uid, processes=4, threads=2, duration=8.0, via=via)
    assert not problems, problems[:10]
    assert len(records) > 50  # the run did real work
    assert not any(r.lost for r in records)


@pytest.mark.soak
@pytest.mark.parametrize("via", VIA_NAMES)
@pytest.mark.timeout(900)
def test_soak_processes_never_overlap(
    redis_server: RedisServer, client: Any, workers: Workers, uid: str, via: str
) -> None:
    """The long soak: 8 processes x 2 threads for SOAK_SECONDS (default 120)."""
    duration = float(os.environ.get("SOAK_SECONDS", "120"))
    records, problems = _run(redis_server, client, workers, uid, processes=8, threads=2, duration=duration, via=via)
    assert not problems, problems[:10]
    assert len(records) > 100


@pytest.mark.soak
@pytest.mark.timeout(900)
def test_soak_fencing_holds_while_workers_are_paused_at_random(
    redis_server: RedisServer, client: Any, workers: Workers, uid: str
) -> None:
    """8 processes, one SIGSTOPped past the ttl every few seconds: paused holders may overlap the next
    holder in time (no lock can prevent that), but the resource accepts tokens only in increasing order
    and rejects only stale writes."""
    duration = float(os.environ.get("SOAK_SECONDS", "120"))
    keys = [f"{uid}-k{i}" for i in range(3)]
    log = f"log:{uid}"
    ttl = 1.0
    started = [
        workers.start(
            "contend",
            port=redis_server.port,
            keys=",".join(keys),
            log=log,
            threads=2,
            duration=duration,
            ttl=ttl,
            wait=10.0,
            hold=0.05,
        )
        for _ in range(8)
    ]
    rng = random.Random(uid)
    end = time.monotonic() + duration - 2 * ttl
    pauses = 0
    while time.monotonic() < end:
        holder = client.get(f"holder:{rng.choice(keys)}")  # most likely inside its critical section
        victim = next((p for p in started if str(p.pid) == holder), rng.choice(started))
        os.kill(victim.pid, signal.SIGSTOP)
        time.sleep(ttl + rng.uniform(0.2, 1.0))
        os.kill(victim.pid, signal.SIGCONT)
        pauses += 1
        time.sleep(rng.uniform(0.2, 1.0))
    for process in started:
        assert process.wait(timeout=duration + 60) == 0, process.stderr.read().decode() if process.stderr else ""
    checker = Checker([Record.loads(line) for line in client.lrange(log, 0, -1)])
    for key in keys:
        checker._fencing(client, key)
    accepted = sum(checker.accepted_count(client, key) for key in keys)
    rejected = sum(checker.rejected_count(client, key) for key in keys)
    totals = f"chaos: {pauses} pauses, {len(checker.records)} critical sections, {accepted} accepted writes, {rejected} stale writes rejected"
    print("\n" + totals)  # noqa: T201 -- the soak's totals
    assert not checker.problems, checker.problems[:10]
