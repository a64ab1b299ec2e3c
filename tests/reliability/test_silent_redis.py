"""A Redis that goes silent mid-body: the execution still returns, within min(5 s, ttl) of the body's end.

The client has redis-py's defaults (no `socket_timeout`), so a store call on the black-holed
connection (`faultproxy.py`) never answers by itself: the final release is what must be
abandoned (DESIGN §2.7 revision 3 (a)). Pipeline and primitive, sync and async.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import threading
import time
from typing import TYPE_CHECKING, Any

import pytest
import redis
import redis.asyncio
import redis.asyncio.cluster
import redis.cluster

from resilience import ResiliencePipelineBuilder
from resilience.primitives import lock
from resilience.stores import RedisLockStore
from tests.redis_support import RedisCluster

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from tests.redis_support import RedisServer
    from tests.reliability.faultproxy import FaultProxy

pytestmark = pytest.mark.redis

TTL = 1.0
BOUND = min(5.0, TTL) + 0.5
"""DESIGN §2.7 revision 3 (a): returned within min(5 s, ttl) after the body ended (+ 0.5 s slack)."""
CUT_AT = 0.3
"""Seconds into the body when the connection is black-holed."""
BODY = 1.5
"""The body's length: past the ttl, so the lease is lost (told on time) before the release."""


def _body_sync(proxy: Any, ended: list[float]) -> None:
    time.sleep(CUT_AT)
    proxy.mode = "blackhole"
    time.sleep(BODY - CUT_AT)
    ended.append(time.monotonic())


async def _body_async(proxy: Any, ended: list[float]) -> None:
    await asyncio.sleep(CUT_AT)
    proxy.mode = "blackhole"
    await asyncio.sleep(BODY - CUT_AT)
    ended.append(time.monotonic())


def _returned_within_bound(proxy: Any, run: Any) -> float:
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


@pytest.fixture(scope="module")
def own_cluster() -> Iterator[RedisCluster]:
    cluster = RedisCluster()
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.close()


@contextlib.contextmanager
def _frozen_at(node: RedisServer) -> Iterator[Callable[[], None]]:
    """A `freeze()` that SIGSTOPs `node` (the key's master); SIGCONT when the test leaves."""
    process = node._process
    assert process is not None

    def freeze() -> None:
        os.kill(process.pid, signal.SIGSTOP)

    try:
        yield freeze
    finally:
        os.kill(process.pid, signal.SIGCONT)


@pytest.mark.timeout(90)
@pytest.mark.parametrize("flavour", ["sync", "async"])
def test_a_frozen_cluster_master_keeps_no_execution_past_the_bound(
    own_cluster: RedisCluster, uid: str, flavour: str
) -> None:
    """Redis Cluster, the key's master SIGSTOPped 0.3 s into the body, no socket timeout: back in time."""
    probe = redis.cluster.RedisCluster(host="127.0.0.1", port=own_cluster.port)
    port = probe.get_node_from_key(f"lock:{uid}").port
    probe.close()
    node = next(n for n in own_cluster.nodes if n.port == port)
    with _frozen_at(node) as freeze:
        proxy = _Freezer(freeze)

        def run(ended: list[float]) -> float:
            if flavour == "sync":
                client = redis.cluster.RedisCluster(host="127.0.0.1", port=own_cluster.port)
                pipeline = ResiliencePipelineBuilder().add_lock(uid, ttl=TTL, store=RedisLockStore(client)).build()
                return _returned(lambda: pipeline.execute(lambda: _body_sync(proxy, ended)))

            async def main() -> float:
                client = redis.asyncio.cluster.RedisCluster(host="127.0.0.1", port=own_cluster.port)
                store = RedisLockStore(async_client=client)
                pipeline = ResiliencePipelineBuilder().add_lock(uid, ttl=TTL, store=store).build()
                return await _returned_async(lambda: pipeline.execute_async(lambda: _body_async(proxy, ended)))

            return asyncio.run(main())

        _returned_within_bound(proxy, run)


class _Freezer:
    """Stands for the proxy in the bodies: setting `mode` to "blackhole" freezes the master."""

    def __init__(self, freeze: Callable[[], None]) -> None:
        self._freeze = freeze
        self._mode = "pass"

    @property
    def mode(self) -> str:
        return self._mode

    @mode.setter
    def mode(self, mode: str) -> None:
        self._mode = mode
        if mode == "blackhole":
            self._freeze()
