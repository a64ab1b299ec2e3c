"""Per-request locks on one client cost a few threads, not one per `lock(client)` call.

`lock(client)` builds a store per call (the idiom of a web handler); the background calls
(renewals, releases) of every store on one client share that client's small pool.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

import pytest
import redis

from resilience.primitives import lock, semaphore

if TYPE_CHECKING:
    from tests.redis_support import RedisServer

pytestmark = pytest.mark.redis

LOCKS = 400
CALLERS = 4
TTL = 10.0
MOST = 8
"""Threads the lock runtime may add for all of them: the timer, a client's pool (4), a callback or two."""


def _resilience_threads() -> list[str]:
    return [thread.name for thread in threading.enumerate() if thread.name.startswith("resilience-")]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("kind", ["lock", "semaphore"])
def test_four_hundred_per_call_locks_on_one_client_keep_the_thread_count_small(
    redis_server: RedisServer, uid: str, kind: str
) -> None:
    """400 `lock(client).run(...)`, each renewed once and released: a handful of threads in all."""
    client = redis.Redis(port=redis_server.port)
    before = len(_resilience_threads())

    def one(n: int) -> None:
        # A long ttl with a short heartbeat: one renewal each, and a lease is lost only if the
        # machine stalls for TTL seconds (a 1 s ttl lost a few leases on a loaded CI runner).
        made = lock(client, ttl=TTL) if kind == "lock" else semaphore(client, limit=2, ttl=TTL)
        made.run(f"{uid}:{n}", lambda _handle: time.sleep(0.015), heartbeat=0.01)  # one renewal, one release

    try:
        with ThreadPoolExecutor(CALLERS) as callers:
            list(callers.map(one, range(LOCKS)))
        threads = _resilience_threads()
        print(f"{len(threads)} resilience threads after {LOCKS} per-call {kind}s")  # noqa: T201 - the measure asked for
        assert len(threads) - before <= MOST, sorted(threads)
    finally:
        client.close()
