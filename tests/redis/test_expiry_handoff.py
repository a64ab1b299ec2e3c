"""Expiry hand-off (DESIGN §2.7 revision 3 (c)): when a lease ends, a waiter acquires within 50 ms.

Measured on the server's clock, so that a loaded machine's scheduling of the test itself does
not count twice: a token is the server time (µs) of its grant, so the waiter's lateness is
`waiter token - (holder token + ttl)`. The holder's lease simply expires (it is never renewed
or released): nothing is announced, and the waiter knows when to try again only from the
remaining life the store answered — also when its attempt landed in the lease's last
millisecond (PTTL 0). A crashed waiter at the head of the queue delays the next one by the
rest of its entry's life, and no more.
"""

from __future__ import annotations

import random
import statistics
import time
from typing import TYPE_CHECKING, Any

import pytest
import redis
import redis.asyncio

from resilience.primitives import lock
from resilience.stores import RedisLockStore
from resilience.stores._redis import companions

if TYPE_CHECKING:
    from tests.redis.conftest import Deployment

pytestmark = pytest.mark.redis

HANDOFFS = 100
BOUND_MS = 50.0
LATE_ALLOWED = 10
"""Hand-offs over 50 ms tolerated of 100: a stall of the loaded test machine, not a backoff step.
A waiter that sleeps past the expiry is late far more often (before the last-millisecond
answer, about 40 of 100 came late, by up to a whole step); a machine at a load of 10 on two
cores stalled 8 of 100 once, so 10 keeps the bound's meaning without failing a busy laptop."""


def _report(name: str, late_ms: list[float]) -> str:
    ordered = sorted(late_ms)
    p90 = ordered[int(len(ordered) * 0.9) - 1]
    return (
        f"{name}: {len(ordered)} hand-offs, lateness after expiry (ms): p50 {statistics.median(ordered):.1f}, "
        f"p90 {p90:.1f}, max {ordered[-1]:.1f}, over {BOUND_MS:.0f} ms: {sum(v > BOUND_MS for v in ordered)}"
    )


def _check(name: str, late_ms: list[float], allowed: int = LATE_ALLOWED) -> None:
    report = _report(name, late_ms)
    print(report)  # noqa: T201 - the distribution, for the report (pytest -s)
    assert sum(v > BOUND_MS for v in late_ms) <= allowed, report
    assert min(late_ms) >= -1.0, f"a waiter acquired before the expiry: {report}"


def _ttls() -> list[float]:
    rng = random.Random(27)
    return [rng.uniform(0.02, 0.045) for _ in range(HANDOFFS)]


def _sync_handoffs(deployment: Deployment) -> list[float]:
    client = deployment.sync_client()
    store = RedisLockStore(client)
    locks = lock(client, ttl=5)
    late: list[float] = []
    try:
        for n, ttl in enumerate(_ttls()):
            key = f"handoff:{n}:{time.monotonic_ns()}"
            held = store.acquire(key, "holder", ttl)
            assert held is not None
            handle = locks.acquire(key, wait=2)
            assert handle is not None
            late.append((handle.token - held) / 1000 - round(ttl * 1000))
            handle.release()
    finally:
        store.close()
        client.close()
    return late


async def _async_handoffs(deployment: Deployment) -> list[float]:
    client = deployment.async_client()
    store = RedisLockStore(async_client=client)
    locks = lock(client, ttl=5)
    late: list[float] = []
    try:
        for n, ttl in enumerate(_ttls()):
            key = f"handoff-async:{n}:{time.monotonic_ns()}"
            held = await store.acquire_async(key, "holder", ttl)
            assert held is not None
            handle = await locks.acquire_async(key, wait=2)
            assert handle is not None
            late.append((handle.token - held) / 1000 - round(ttl * 1000))
            await handle.release_async()
    finally:
        await store.aclose()
        await client.aclose()
    return late


def _late(late_ms: list[float]) -> int:
    assert min(late_ms) >= -1.0, f"a waiter acquired before the expiry: {_report('run', late_ms)}"
    return sum(v > BOUND_MS for v in late_ms)


# A machine busy with other work stalls the waiter's wake-up now and then (at a load of 10 on
# two cores, 8 of 100 hand-offs came late once; at 20, more than 10 twice in a row): up to two
# more runs of 100 tell such stalls from a waiter that sleeps past the expiry, which is late
# every time. Early is never tolerated.
def test_a_waiter_takes_an_expired_lease_within_50_ms(deployment: Deployment) -> None:
    late = _sync_handoffs(deployment)
    for _ in range(2):
        if _late(late) <= LATE_ALLOWED:
            break
        late = _sync_handoffs(deployment)
    _check(f"sync, {deployment.name}", late)


async def test_an_async_waiter_takes_an_expired_lease_within_50_ms(deployment: Deployment) -> None:
    late = await _async_handoffs(deployment)
    for _ in range(2):
        if _late(late) <= LATE_ALLOWED:
            break
        late = await _async_handoffs(deployment)
    _check(f"async, {deployment.name}", late)


def test_a_crashed_queue_head_delays_the_next_waiter_only_by_its_entry_life(redis_server: Any) -> None:
    """The head of the queue is gone (its entry expires within 0.1-0.3 s); the holder releases.

    The release announces the head's turn, which nobody takes; the live waiter behind it is told
    how long the dead entry lives and acquires within 50 ms of its expiry (server clock).
    """
    client = redis.Redis(host=redis_server.host, port=redis_server.port)
    store = RedisLockStore(client)
    locks = lock(client, ttl=5)
    rng = random.Random(3)
    late: list[float] = []
    try:
        for n in range(10):
            key = f"dead-head:{n}:{time.monotonic_ns()}"
            assert store.acquire(key, "holder", 5) is not None
            queue = companions(store.key(key))
            assert queue is not None
            assert store.acquire_or_queue(key, "dead", 5)[0] is None  # queued, never tries again
            seconds, micros = client.time()
            dead_until = seconds * 1000 + micros // 1000 + rng.randint(100, 300)
            client.zadd(queue[0], {"dead": 0})  # arrived long ago, its entry refreshed until then
            client.zadd(queue[1], {"dead": dead_until})
            client.pexpire(queue[1], 3000)
            assert store.release(key, "holder")
            handle = locks.acquire(key, wait=3)
            assert handle is not None
            late.append(handle.token / 1000 - dead_until)
            handle.release()
    finally:
        store.close()
        client.close()
    _check("behind a crashed head", late, allowed=2)
