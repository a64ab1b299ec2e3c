"""A shared circuit stays alive: it recovers under sparse traffic, survives a hung or flushed
Redis, keeps its failures when it falls back to local state, and never lets a stale control
or a one-loop-per-call program defeat it. Real Redis, one process (the fleet-wide proofs are in
tests/reliability/test_fleet_circuit.py).
"""

from __future__ import annotations

import time
import uuid
from typing import TYPE_CHECKING, Any

import pytest
import redis

from resilience import BrokenCircuitError, ResiliencePipeline, ResiliencePipelineBuilder
from resilience.stores import RedisCircuitStateStore
from resilience.strategies import CircuitBreakerManualControl, CircuitBreakerStateProvider, CircuitState

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from tests.redis_support import RedisServer

pytestmark = pytest.mark.redis


def shared(
    store: RedisCircuitStateStore,
    key: str,
    *,
    provider: CircuitBreakerStateProvider | None = None,
    control: CircuitBreakerManualControl | None = None,
    interval: float = 0.05,
    brk: float = 0.3,
    throughput: int = 4,
    sampling: float = 30.0,
) -> ResiliencePipeline:
    return (
        ResiliencePipelineBuilder(name="liveness")
        .add_circuit_breaker(
            failure_ratio=0.5,
            minimum_throughput=throughput,
            sampling_duration=sampling,
            break_duration=brk,
            handle=ConnectionError,
            state_store=store,
            circuit_key=key,
            sync_interval=interval,
            state_provider=provider,
            manual_control=control,
        )
        .build()
    )


def until(condition: Callable[[], bool], timeout: float = 5.0) -> float:
    """Poll (bounded) until `condition()`; the seconds it took."""
    start = time.monotonic()
    while not condition():
        if time.monotonic() - start > timeout:
            pytest.fail(f"not within {timeout}s")
        time.sleep(0.005)
    return time.monotonic() - start


def fail() -> None:
    raise ConnectionError("dependency down")


@pytest.fixture
def key() -> str:
    return f"live-{uuid.uuid4().hex[:10]}"


@pytest.fixture
def client(redis_server: RedisServer) -> Iterator[Any]:
    connection = redis.Redis(port=redis_server.port, socket_timeout=2)
    yield connection
    connection.close()


def open_it(pipeline: ResiliencePipeline, provider: CircuitBreakerStateProvider) -> None:
    for _ in range(4):
        pipeline.settle(fail)
    until(lambda: provider.state is CircuitState.OPEN)


@pytest.mark.parametrize("gap", [1.0, 5.0])
def test_sparse_calls_after_the_break_probe_and_close(client: Any, key: str, gap: float) -> None:
    """Calls `gap` seconds apart after a 0.3 s break: the first one is the probe and closes it."""
    provider = CircuitBreakerStateProvider()
    pipeline = shared(RedisCircuitStateStore(client), key, provider=provider)
    open_it(pipeline, provider)
    time.sleep(gap)
    outcome = pipeline.settle(lambda: "recovered")
    assert outcome.is_ok, outcome
    assert provider.state is CircuitState.CLOSED
    until(lambda: client.hget(f"circuit:{key}", "st") == b"0")  # closed for the fleet too


def test_the_first_call_after_the_break_is_the_probe(client: Any, key: str) -> None:
    """As a local circuit: a call a moment after the break's end goes through as the probe."""
    provider = CircuitBreakerStateProvider()
    pipeline = shared(RedisCircuitStateStore(client), key, provider=provider, brk=0.5)
    open_it(pipeline, provider)
    with pytest.raises(BrokenCircuitError):
        pipeline.execute(lambda: "rejected")  # within the break
    time.sleep(0.5 + 0.05)  # the break, and one sync interval of slack
    assert pipeline.execute(lambda: "probe") == "probe"
    assert provider.state is CircuitState.CLOSED
