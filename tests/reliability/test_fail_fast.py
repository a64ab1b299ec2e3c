"""A down or hung Redis fails an acquire fast: never a second store timeout in the caller.

After a failed acquire the best-effort release of its owner id (in case the server acted but
the reply was lost) goes in the background; the caller gets the acquire's own error at once.
"""

from __future__ import annotations

import asyncio
import socket
import time
from typing import TYPE_CHECKING

import pytest
import redis
import redis.asyncio
import redis.asyncio.retry
import redis.retry
from redis.backoff import NoBackoff

from resilience import ResiliencePipelineBuilder
from resilience.stores import RedisLockStore

if TYPE_CHECKING:
    from tests.reliability.faultproxy import FaultProxy

pytestmark = pytest.mark.redis

SOCKET_TIMEOUT = 1.0
BOUND = 1.3


def _options(retry: type[redis.retry.Retry | redis.asyncio.retry.Retry] = redis.retry.Retry) -> dict[str, object]:
    # The client's own retries would multiply the timeout (redis-py retries timeouts 3 times
    # by default): they are the client's choice, not the lock's, so they are off here. An
    # asyncio client takes redis.asyncio's Retry (redis-py 8.2 warns about a sync one).
    return {"socket_timeout": SOCKET_TIMEOUT, "socket_connect_timeout": SOCKET_TIMEOUT, "retry": retry(NoBackoff(), 0)}


@pytest.mark.timeout(60)
def test_a_blackholed_redis_fails_a_sync_acquire_within_the_socket_timeout(proxy: FaultProxy, uid: str) -> None:
    proxy.mode = "blackhole"
    client = redis.Redis(port=proxy.port, **_options())  # type: ignore[arg-type]
    pipeline = ResiliencePipelineBuilder().add_lock(uid, ttl=5, store=RedisLockStore(client)).build()
    started = time.monotonic()
    with pytest.raises(redis.exceptions.RedisError):
        pipeline.execute(lambda: None)
    elapsed = time.monotonic() - started
    client.close()
    assert elapsed < BOUND, f"add_lock failed after {elapsed:.2f}s"


@pytest.mark.timeout(60)
async def test_a_blackholed_redis_fails_an_async_acquire_within_the_socket_timeout(proxy: FaultProxy, uid: str) -> None:
    proxy.mode = "blackhole"
    client = redis.asyncio.Redis(port=proxy.port, **_options(redis.asyncio.retry.Retry))  # type: ignore[arg-type]
    pipeline = ResiliencePipelineBuilder().add_lock(uid, ttl=5, store=RedisLockStore(async_client=client)).build()

    async def body() -> None:
        return None

    started = time.monotonic()
    with pytest.raises(redis.exceptions.RedisError):
        await pipeline.execute_async(body)
    elapsed = time.monotonic() - started
    assert elapsed < BOUND, f"add_lock failed after {elapsed:.2f}s"
    # The best-effort release runs on in the background until its own socket timeout: let it
    # end (and drop its connection) before the client closes, or its transport outlives the loop.
    background = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
    if background:
        await asyncio.wait(background, timeout=SOCKET_TIMEOUT * 5)
    await client.aclose()


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.mark.timeout(60)
def test_a_closed_port_fails_within_one_connect_timeout(uid: str) -> None:
    client = redis.Redis(port=_closed_port(), **_options())  # type: ignore[arg-type]
    pipeline = ResiliencePipelineBuilder().add_lock(uid, ttl=5, store=RedisLockStore(client)).build()
    started = time.monotonic()
    with pytest.raises(redis.exceptions.ConnectionError):
        pipeline.execute(lambda: None)
    assert time.monotonic() - started < SOCKET_TIMEOUT
    client.close()
