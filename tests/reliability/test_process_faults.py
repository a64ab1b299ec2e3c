"""Holders that stop or die, and a server that restarts: what the lock and its fencing do.

Each test states the expected behaviour in its docstring (docs/guarantees.md cites them).
"""

from __future__ import annotations

import os
import signal
import threading
import time
from typing import TYPE_CHECKING, Any

import pytest
import redis

from resilience import LockLostError, ResiliencePipelineBuilder, get_context, get_lock_token
from resilience.stores import RedisLockStore
from tests.reliability.conftest import read_log, wait_for
from tests.reliability.fencing import Checker, Record, fenced_keys, fenced_write, server_us

if TYPE_CHECKING:
    from tests.redis_support import RedisServer
    from tests.reliability.conftest import Workers

pytestmark = pytest.mark.redis

TTL = 1.5
SLACK = 1.5  # generous: a loaded 2-core VM


def _acquired(client: Any, log: str) -> int:
    wait_for(lambda: any(line[0] == "acquired" for line in read_log(client, log)), timeout=20)
    return next(int(line[1]) for line in read_log(client, log) if line[0] == "acquired")


@pytest.mark.timeout(60)
def test_a_holder_stopped_past_its_ttl_loses_the_lease_and_is_fenced(
    redis_server: RedisServer, client: Any, workers: Workers, uid: str
) -> None:
    """SIGSTOP past the ttl, SIGCONT: the lease is gone, its writes are rejected, it sees LockLostError and an aborted signal."""
    key, log = f"{uid}-stop", f"log:{uid}"
    holder = workers.start("hold", port=redis_server.port, keys=key, log=log, ttl=TTL, duration=30)
    old = _acquired(client, log)
    os.kill(holder.pid, signal.SIGSTOP)
    try:
        time.sleep(TTL + 0.5)
        store = RedisLockStore(client)
        new = store.acquire(key, "intruder", 30)  # the stopped holder's lease expired on the server
        assert new is not None
        assert new > old
        assert fenced_write(client, key, new, "intruder")
    finally:
        os.kill(holder.pid, signal.SIGCONT)
    assert holder.wait(timeout=20) == 0
    lines = read_log(client, log)
    assert lines[-1] == ["result", "LockLostError", "1"], lines[-5:]
    accepted = [line.split() for line in client.lrange(fenced_keys(key)[1], 0, -1)]
    tokens = [int(token) for token, _ in accepted]
    assert tokens.index(new) == len(tokens) - 1  # nothing of the old holder was accepted after the intruder
    assert all(int(line[1]) == old for line in lines if line[0] == "write" and line[2] == "0")
    assert store.release(key, "intruder")


@pytest.mark.timeout(60)
def test_a_killed_holder_frees_the_key_within_ttl_and_the_next_token_is_higher(
    redis_server: RedisServer, client: Any, workers: Workers, uid: str
) -> None:
    """SIGKILL: the key frees within ttl (+ slack) of the kill and the next token is higher."""
    key, log = f"{uid}-kill", f"log:{uid}"
    holder = workers.start("hold", port=redis_server.port, keys=key, log=log, ttl=TTL, duration=30)
    old = _acquired(client, log)
    store = RedisLockStore(client)
    assert store.acquire(key, "next", 30) is None
    holder.kill()
    killed = time.monotonic()
    holder.wait(timeout=10)
    tokens: list[int] = []
    waited = wait_for(lambda: tokens.append(store.acquire(key, "next", 30) or 0) or tokens[-1] > 0, timeout=TTL + SLACK)
    assert time.monotonic() - killed <= TTL + SLACK
    assert waited <= TTL + SLACK
    assert tokens[-1] > old
    assert store.release(key, "next")


@pytest.mark.timeout(60)
def test_a_restart_without_persistence_loses_leases_and_work_resumes(fresh_redis_server: RedisServer) -> None:
    """Restart mid-run: later tokens exceed earlier ones, the holder detects the loss within ttl, work resumes unaided."""
    connection = redis.Redis(port=fresh_redis_server.port, socket_timeout=2, socket_connect_timeout=1)
    store = RedisLockStore(connection)
    lock = ResiliencePipelineBuilder().add_lock("job", ttl=TTL, store=store).build()
    resumable = (
        ResiliencePipelineBuilder()
        .add_retry(max_retries=50, delay=0.1, handle=redis.exceptions.RedisError)
        .add_lock("job", ttl=TTL, wait=5, store=store)
        .build()
    )
    try:
        before = [resumable.execute(get_lock_token) for _ in range(5)]
        holding = threading.Event()
        lost_at: list[float] = []
        reason: list[BaseException | None] = []

        def long_job() -> None:
            context = get_context()
            assert context is not None
            holding.set()
            if context.signal.wait(timeout=20):
                lost_at.append(time.monotonic())
            reason.append(context.signal.reason)

        holder = threading.Thread(target=lambda: lock.execute(long_job))
        holder.start()
        assert holding.wait(10)
        restarted = time.monotonic()
        fresh_redis_server.restart()
        holder.join(timeout=30)
        assert lost_at, "the holder never noticed the restart"
        assert lost_at[0] - restarted <= TTL + SLACK
        assert isinstance(reason[0], LockLostError)
        after = [resumable.execute(get_lock_token) for _ in range(5)]  # no manual reconnect, no flush
        assert min(t or 0 for t in after) > max(t or 0 for t in before)
        assert after == sorted(after)
    finally:
        store.close()
        connection.close()


@pytest.mark.timeout(120)
def test_processes_contending_through_a_restart_keep_fencing_and_resume(
    redis_server: RedisServer, fresh_redis_server: RedisServer, client: Any, workers: Workers, uid: str
) -> None:
    """Locks on a server that restarts mid-run (logs and the fenced resource on another): tokens after
    the restart exceed every token before it, fencing holds throughout, and the workers resume unaided."""
    keys = [f"{uid}-r{i}" for i in range(2)]
    log = f"log:{uid}"
    started = [
        workers.start(
            "contend",
            port=redis_server.port,
            lock_port=fresh_redis_server.port,
            keys=",".join(keys),
            log=log,
            threads=2,
            duration=7,
            ttl=TTL,
            wait=5,
        )
        for _ in range(2)
    ]
    # Restart once every key has seen work (a loaded machine can take seconds to start Python).
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        seen = {Record.loads(line).key for line in client.lrange(log, 0, -1)}
        if seen >= set(keys):
            break
        time.sleep(0.1)
    time.sleep(0.5)
    before_restart = server_us(client)
    fresh_redis_server.restart()
    after_restart = server_us(client)
    for process in started:
        assert process.wait(timeout=60) == 0, process.stderr.read().decode() if process.stderr else ""
    records = [Record.loads(line) for line in client.lrange(log, 0, -1)]
    checker = Checker(records)
    for key in keys:
        checker._fencing(client, key)
    assert not checker.problems, checker.problems[:10]
    for key in keys:
        before = [r.token for r in records if r.key == key and r.start < before_restart]
        after = [r.token for r in records if r.key == key and r.start > after_restart]
        assert before, key
        assert after, f"{key}: no work after the restart"
        assert min(after) > max(before)
