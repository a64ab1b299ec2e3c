"""A Redis that goes silent mid-body: the execution still returns, within min(5 s, ttl) of the body's end.

The client has redis-py's defaults (no `socket_timeout`), so a store call on the black-holed
connection (`faultproxy.py`) never answers by itself: the final release is what must be
abandoned (DESIGN §2.7 revision 3 (a)). Pipeline and primitive, sync and async.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from typing import TYPE_CHECKING, Any

import pytest
import redis
import redis.asyncio

from resilience import ResiliencePipelineBuilder
from resilience.primitives import lock
from resilience.stores import RedisLockStore

if TYPE_CHECKING:
    from tests.reliability.faultproxy import FaultProxy

pytestmark = pytest.mark.redis

TTL = 1.0
BOUND = min(5.0, TTL) + 0.5
"""DESIGN §2.7 revision 3 (a): returned within min(5 s, ttl) after the body ended (+ 0.5 s slack)."""
CUT_AT = 0.3
"""Seconds into the body when the connection is black-holed."""
BODY = 1.5
"""The body's length: past the ttl, so the lease is lost (told on time) before the release."""


def _body_sync(proxy: FaultProxy, ended: list[float]) -> None:
    time.sleep(CUT_AT)
    proxy.mode = "blackhole"
    time.sleep(BODY - CUT_AT)
    ended.append(time.monotonic())


async def _body_async(proxy: FaultProxy, ended: list[float]) -> None:
    await asyncio.sleep(CUT_AT)
    proxy.mode = "blackhole"
    await asyncio.sleep(BODY - CUT_AT)
    ended.append(time.monotonic())


def _returned_within_bound(proxy: FaultProxy, run: Any) -> float:
    """Run `run(ended)` in a thread; the seconds from the body's end to the return (failing past the bound).

    `run` returns the time its execution returned (an async one, before its loop closes).
    """
    ended: list[float] = []
    returned: list[float] = []

    def target() -> None:
        returned.append(run(ended))

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    try:
        thread.join(timeout=CUT_AT + BODY + BOUND + 5.0)
        assert ended, "the body never ended"
        assert returned, f"no return {BOUND + 5.0:.1f} s after the body ended"
        took = returned[0] - ended[0]
        assert took <= BOUND, f"returned {took:.2f} s after the body ended (bound {BOUND} s)"
        print(f"returned {took:.3f} s after the body ended")  # noqa: T201 - the measure the issue asks for
        return took
    finally:
        proxy.mode = "drop"  # wakes a call still stuck on the silent connection
        thread.join(timeout=10)


def _returned(execution: Any) -> float:
    """Call `execution()`; when it returned or raised (a lost lease raises in the primitive)."""
    with contextlib.suppress(Exception):  # only the time of the return is tested
        execution()
    return time.monotonic()


async def _returned_async(execution: Any) -> float:
    with contextlib.suppress(Exception):
        await execution()
    return time.monotonic()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("api", ["pipeline", "primitive"])
def test_a_sync_execution_returns_within_the_bound_when_redis_goes_silent(
    proxy: FaultProxy, uid: str, api: str
) -> None:
    """Black-holed 0.3 s into the body, client without socket timeout: back within min(5 s, ttl) + 0.5 s."""
    client = redis.Redis(port=proxy.port)  # socket_timeout=None: redis-py's default
    pipeline = ResiliencePipelineBuilder().add_lock(uid, ttl=TTL, store=RedisLockStore(client)).build()
    locks = lock(client, ttl=TTL)

    def run(ended: list[float]) -> float:
        if api == "pipeline":
            return _returned(lambda: pipeline.execute(lambda: _body_sync(proxy, ended)))
        return _returned(lambda: locks.run(uid, lambda _handle: _body_sync(proxy, ended)))

    try:
        _returned_within_bound(proxy, run)
    finally:
        client.close()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("api", ["pipeline", "primitive"])
def test_an_async_execution_returns_within_the_bound_when_redis_goes_silent(
    proxy: FaultProxy, uid: str, api: str
) -> None:
    """The asyncio twin: the release is abandoned after min(5 s, ttl), not after a fixed 5 s."""

    def run(ended: list[float]) -> float:
        async def main() -> float:
            client = redis.asyncio.Redis(port=proxy.port)  # no socket_timeout
            if api == "pipeline":
                store = RedisLockStore(async_client=client)
                pipeline = ResiliencePipelineBuilder().add_lock(uid, ttl=TTL, store=store).build()
                return await _returned_async(lambda: pipeline.execute_async(lambda: _body_async(proxy, ended)))
            locks = lock(client, ttl=TTL)
            return await _returned_async(lambda: locks.run_async(uid, lambda _handle: _body_async(proxy, ended)))

        return asyncio.run(main())

    _returned_within_bound(proxy, run)
