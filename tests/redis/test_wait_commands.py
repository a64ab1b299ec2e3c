"""A sync wait on a held Redis key sleeps on the release notification, without polling.

A 1 s wait with no release: the refused acquire (which queues the waiter), one SUBSCRIBE, the
last attempt, and the release that takes the waiter out of the fair queue when it gives up.
Before, the wait was cut into 50 ms `wait_released` slices, each a script call (23 calls for 1 s).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import pytest
import redis

from resilience.primitives import lock

if TYPE_CHECKING:
    from tests.redis_support import RedisServer

pytestmark = pytest.mark.redis

# What the client sends (commandstats also counts the commands scripts run inside the server).
SENT = {"evalsha", "eval", "subscribe", "ssubscribe", "psubscribe", "ping"}


def _calls(admin: redis.Redis) -> int:
    stats = admin.info("commandstats")
    return sum(int(value["calls"]) for name, value in stats.items() if name.removeprefix("cmdstat_") in SENT)


@pytest.mark.timeout(60)
def test_a_one_second_wait_sends_at_most_four_commands(fresh_redis_server: RedisServer) -> None:
    admin = redis.Redis(port=fresh_redis_server.port)
    client = redis.Redis(port=fresh_redis_server.port)
    locks = lock(client, ttl=30)
    holder = locks.acquire("held")
    assert holder is not None
    warm = locks.acquire("warm")  # scripts cached, connections open
    assert warm is not None
    assert warm.release()
    before = _calls(admin)
    started = time.monotonic()
    assert locks.acquire("held", retries=1, retry_delay=1.0) is None
    waited = time.monotonic() - started
    sent = _calls(admin) - before
    assert waited >= 0.9
    assert sent <= 4, f"{sent} commands for a 1 s wait"
    assert holder.release()
    locks.close()
    client.close()
    admin.close()
