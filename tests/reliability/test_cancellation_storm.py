"""A cancelled task never returns normally from a lock on Redis (a cancellation storm).

redis-py's asyncio client swallows a cancellation that lands in some of its awaits on Python
3.11 (the command returns, or raises its own error, and the task goes on). After each store
await, the lease engine raises `CancelledError` in a task that is being cancelled: a shutdown
that cancels and awaits its workers never hangs on one that carried on. Runs on every
interpreter; only 3.11 swallowed.
"""

from __future__ import annotations

import asyncio
import random
from typing import TYPE_CHECKING, Any

import pytest
import redis.asyncio

from resilience import ResiliencePipelineBuilder
from resilience.primitives import lock
from resilience.stores import RedisLockStore

if TYPE_CHECKING:
    from tests.redis_support import RedisServer

pytestmark = pytest.mark.redis

ROUNDS = 300
WORKERS = 6


async def _storm(run: Any) -> tuple[int, int]:
    """Start `WORKERS` executions on one key at a time, cancel one at a random moment; (cancels, swallowed)."""
    rng = random.Random(27)
    cancels = swallowed = 0
    for _ in range(ROUNDS // WORKERS):
        tasks = [asyncio.ensure_future(run()) for _ in range(WORKERS)]
        await asyncio.sleep(rng.uniform(0, 0.004))
        victims = [task for task in tasks if not task.done()]
        for task in victims:
            task.cancel()
        cancels += len(victims)
        for task in tasks:
            # Any end but CancelledError (a return, LockNotAcquiredError, ...) of a cancelled task is a swallow.
            done = await asyncio.gather(task, return_exceptions=True)
            if task in victims and not isinstance(done[0], asyncio.CancelledError):
                swallowed += 1
    return cancels, swallowed


@pytest.mark.timeout(120)
@pytest.mark.parametrize("api", ["pipeline", "primitive"])
async def test_a_cancelled_execution_never_returns_normally(redis_server: RedisServer, uid: str, api: str) -> None:
    """Every cancel that reaches a running execution ends it with CancelledError."""
    client = redis.asyncio.Redis(port=redis_server.port)
    store = RedisLockStore(async_client=client)
    pipeline = ResiliencePipelineBuilder().add_lock(uid, ttl=2, wait=0.2, store=store).build()
    locks = lock(client, ttl=2)

    async def body(*_args: object) -> None:
        await asyncio.sleep(0.001)

    async def run() -> None:
        if api == "pipeline":
            await pipeline.execute_async(body)
        else:
            await locks.run_async(uid, body, wait=0.2)

    try:
        cancels, swallowed = await _storm(run)
        print(f"{api}: {swallowed} of {cancels} cancels swallowed")  # noqa: T201 - the measure asked for
        assert cancels > ROUNDS / 2
        assert swallowed == 0
    finally:
        await client.aclose()
