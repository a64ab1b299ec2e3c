"""Shared circuits in one process over a real server: the background sync, outages, asyncio-only stores.

The multi-process proofs (latency, one probe for the fleet, restarts) are in
tests/reliability/test_fleet_circuit.py; these check the sync's own behaviour.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import socket
import time
import uuid
import weakref
from typing import TYPE_CHECKING, Any

import pytest
import redis
import redis.asyncio

from resilience import BrokenCircuitError, ResiliencePipeline, ResiliencePipelineBuilder, ValidationError
from resilience.stores import RedisCircuitStateStore
from resilience.stores._redis_circuit import CircuitReply
from resilience.strategies import (
    CircuitBreakerManualControl,
    CircuitBreakerStateProvider,
    CircuitState,
    OnCircuitStateSyncFailedArguments,
)
from resilience.strategies.circuit._sync import _WORKERS, SyncWorker, _serve_async
from resilience.testing import capture_events

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from resilience.telemetry import TelemetryEvent
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
        ResiliencePipelineBuilder(name="fleet-test")
        .add_circuit_breaker(
            failure_ratio=0.5,
            minimum_throughput=throughput,
            sampling_duration=sampling,
            break_duration=brk,
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


def named(events: list[TelemetryEvent], name: str, key: str | None = None) -> list[TelemetryEvent]:
    """The events called `name` (of the circuit `key`: other tests' circuits may still be syncing)."""
    found = [event for event in events if event.name == name]
    if key is not None:
        found = [event for event in found if getattr(event.arguments, "circuit_key", None) == key]
    return found


@pytest.fixture
def key() -> str:
    return f"svc-{uuid.uuid4().hex[:10]}"


@pytest.fixture
def client(redis_server: RedisServer) -> Iterator[Any]:
    connection = redis.Redis(port=redis_server.port)
    yield connection
    connection.close()


def test_two_circuits_with_one_key_are_one_circuit(client: Any, key: str) -> None:
    """An opening, the single probe and an isolation made in one circuit reach the other."""
    providers = (CircuitBreakerStateProvider(), CircuitBreakerStateProvider())
    control = CircuitBreakerManualControl()
    with capture_events() as events:
        first = shared(RedisCircuitStateStore(client), key, provider=providers[0], control=control)
        second = shared(RedisCircuitStateStore(client), key, provider=providers[1])
        for _ in range(4):
            first.settle(fail)
        until(lambda: providers[1].state is CircuitState.OPEN)
        with pytest.raises(BrokenCircuitError):
            second.execute(lambda: "rejected")
        # A transition learned from the fleet is applied, then reported: its event may follow
        # the state a reader sees by a moment.
        until(lambda: len(named(events, "OnCircuitOpened")) >= 2)
        opened = named(events, "OnCircuitOpened")
        assert len(opened) == 2
        assert {event.arguments.is_manual for event in opened} == {False}  # type: ignore[union-attr]
        time.sleep(0.3)  # the break
        results: list[str] = []

        def probe_second() -> bool:
            outcome = second.settle(lambda: "probed")
            if outcome.is_ok:
                results.append(outcome.unwrap())
            return bool(results)

        until(probe_second)
        until(lambda: providers[0].state is CircuitState.CLOSED)
        assert providers[1].state is CircuitState.CLOSED
        control.isolate()
        until(lambda: providers[1].state is CircuitState.ISOLATED)
        control.close()
        until(lambda: providers[1].state is CircuitState.CLOSED)

        def manual_closings() -> list[TelemetryEvent]:
            return [event for event in named(events, "OnCircuitClosed") if event.arguments.is_manual]  # type: ignore[union-attr]

        until(lambda: len(manual_closings()) >= 2)
    assert second.execute(lambda: "flows") == "flows"
    assert len(manual_closings()) == 2  # one per circuit


def test_the_closed_path_sends_nothing_per_call(fresh_redis_server: RedisServer, key: str) -> None:
    """A thousand successes cost the interval's exchanges, not a thousand round trips.

    A server of its own: other tests' circuits would add their exchanges to the count.
    """
    redis_server = fresh_redis_server
    client = redis.Redis(port=redis_server.port)
    pipeline = shared(RedisCircuitStateStore(client), key, interval=0.1)
    time.sleep(0.2)
    before = _evalsha_calls(redis_server)
    start = time.monotonic()
    for _ in range(1000):
        pipeline.execute(lambda: None)
    elapsed = time.monotonic() - start
    time.sleep(0.15)
    sent = _evalsha_calls(redis_server) - before
    assert sent <= 2 + 12 * (elapsed + 0.15), sent  # the interval's exchanges, whatever the call count
    client.close()


def _evalsha_calls(server: RedisServer) -> int:
    for line in server.command("INFO", "commandstats").splitlines():
        if line.startswith("cmdstat_evalsha:"):
            return int(line.split("calls=")[1].split(",")[0])
    return 0


def test_an_unreachable_store_leaves_a_local_circuit_that_catches_up(fresh_redis_server: RedisServer, key: str) -> None:
    """Down: calls flow, one `OnCircuitStateSyncFailed`, local decisions; back: the opening is shared."""
    client = redis.Redis(port=fresh_redis_server.port, socket_timeout=0.5, socket_connect_timeout=0.5)
    provider = CircuitBreakerStateProvider()
    with capture_events() as events:
        pipeline = shared(RedisCircuitStateStore(client), key, provider=provider, brk=30)
        until(lambda: client.exists(f"circuit:{key}") == 1)
        fresh_redis_server.stop()
        start = time.monotonic()
        assert pipeline.execute(lambda: "works") == "works"
        # Never waits for the store: a call that did would take the client's 0.5 s timeout.
        assert time.monotonic() - start < 0.4
        until(lambda: bool(named(events, "OnCircuitStateSyncFailed", key)))
        for _ in range(4):
            pipeline.settle(fail)
        assert provider.state is CircuitState.OPEN  # decided locally, on the local ratio
        fresh_redis_server.start()
        until(lambda: client.hget(f"circuit:{key}", "st") == b"1", timeout=10)
    failed = named(events, "OnCircuitStateSyncFailed", key)
    assert len(failed) == 1
    event = failed[0]
    assert event.severity.name == "WARNING"
    assert isinstance(event.arguments, OnCircuitStateSyncFailedArguments)
    assert event.arguments.circuit_key == key
    assert isinstance(event.arguments.error, (redis.exceptions.ConnectionError, TimeoutError))  # redis-py retries first
    assert provider.state is CircuitState.OPEN
    client.close()


def test_a_restart_while_closed_leaves_a_circuit_the_fleet_opens_again(
    fresh_redis_server: RedisServer, key: str
) -> None:
    """Redis loses a CLOSED circuit (epoch > 0): it is written back closed, and failures spread
    over two members (too few for either alone) open it for both within one sampling_duration."""
    sampling = 2.0  # headroom for a loaded machine: the opening itself takes ~0.1 s (flushes every 0.05 s)
    client = redis.Redis(port=fresh_redis_server.port, socket_timeout=0.5, socket_connect_timeout=0.5)
    providers = (CircuitBreakerStateProvider(), CircuitBreakerStateProvider())
    control = CircuitBreakerManualControl()
    first = shared(RedisCircuitStateStore(client), key, provider=providers[0], control=control, sampling=sampling)
    second = shared(RedisCircuitStateStore(client), key, provider=providers[1], sampling=sampling, brk=30)
    control.isolate()  # a round trip through ISOLATED: the epoch the store must get back is 2
    until(lambda: providers[1].state is CircuitState.ISOLATED)
    control.close()
    until(lambda: providers[1].state is CircuitState.CLOSED and client.hget(f"circuit:{key}", "ep") == b"2")
    fresh_redis_server.restart()  # an empty server on the same port
    until(lambda: client.hget(f"circuit:{key}", "ep") == b"2", timeout=5)  # written back by the fleet
    assert client.hget(f"circuit:{key}", "st") == b"0"
    assert client.pttl(f"circuit:{key}") > 0
    assert (providers[0].state, providers[1].state) == (CircuitState.CLOSED, CircuitState.CLOSED)
    assert second.execute(lambda: "flows") == "flows"
    start = time.monotonic()
    for pipeline in (first, second, first, second):
        pipeline.settle(fail)  # 2 of 4 each: below minimum_throughput alone, the fleet's ratio is 0.8
    until(lambda: all(provider.state is CircuitState.OPEN for provider in providers), timeout=sampling)
    elapsed = time.monotonic() - start
    assert client.hget(f"circuit:{key}", "st") == b"1"
    with pytest.raises(BrokenCircuitError):
        second.execute(lambda: "rejected")
    assert elapsed < sampling, elapsed
    client.close()


def test_a_store_that_does_not_answer_is_left_behind_by_the_watchdog(key: str) -> None:
    """A server that accepts and never replies: the circuit goes local after `stall_after`."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        client = redis.Redis(port=silent.getsockname()[1], socket_timeout=30)
        with capture_events() as events:
            start = time.monotonic()
            pipeline = shared(RedisCircuitStateStore(client), key, interval=0.1)  # waits for the first sync
            until(lambda: bool(named(events, "OnCircuitStateSyncFailed", key)), timeout=10)
            waited = time.monotonic() - start
            assert pipeline.execute(lambda: "works") == "works"
        error = named(events, "OnCircuitStateSyncFailed", key)[0].arguments.error  # type: ignore[union-attr]
        assert isinstance(error, TimeoutError)
        assert 0.9 < waited < 5
        with contextlib.suppress(Exception):
            client.connection_pool.disconnect()


async def test_an_asyncio_only_store_syncs_from_a_task(redis_server: RedisServer, client: Any, key: str) -> None:
    """Without a sync client the sync runs on the loop; sync executions are refused with advice."""
    async_client = redis.asyncio.Redis(port=redis_server.port)
    provider = CircuitBreakerStateProvider()
    pipeline = shared(RedisCircuitStateStore(async_client=async_client), key, provider=provider)
    other = shared(RedisCircuitStateStore(client), key)
    assert await pipeline.execute_async(_ok) == "ok"
    for _ in range(4):
        other.settle(fail)
    deadline = time.monotonic() + 5
    while provider.state is not CircuitState.OPEN and time.monotonic() < deadline:
        await asyncio.sleep(0.01)
    assert provider.state is CircuitState.OPEN
    with pytest.raises(ValidationError, match="execute_async"):
        pipeline.execute(lambda: None)
    await pipeline.strategies[0]._controller.sync._store.aclose()  # type: ignore[attr-defined]
    await async_client.aclose()


async def _ok() -> str:
    return "ok"


async def test_an_asyncio_only_store_going_down_is_reported(fresh_redis_server: RedisServer, key: str) -> None:
    """The asyncio sync reports an outage like the thread does."""
    async_client = redis.asyncio.Redis(port=fresh_redis_server.port, socket_timeout=0.5)
    with capture_events() as events:
        store = RedisCircuitStateStore(async_client=async_client)
        pipeline = shared(store, key)
        assert await pipeline.execute_async(_ok) == "ok"
        fresh_redis_server.stop()
        deadline = time.monotonic() + 5
        while not named(events, "OnCircuitStateSyncFailed", key) and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        assert await pipeline.execute_async(_ok) == "ok"
    assert len(named(events, "OnCircuitStateSyncFailed", key)) == 1
    await store.aclose()
    await async_client.aclose()


def test_a_dropped_pipeline_is_no_longer_synced(client: Any, key: str) -> None:
    """The worker holds circuits weakly: a collected pipeline leaves its schedule."""
    store = RedisCircuitStateStore(client)
    pipeline = shared(store, key)
    worker = _WORKERS[store]
    time.sleep(0.1)
    del pipeline

    def collected() -> bool:
        gc.collect()  # again each time: the sync thread may have held it during the last one
        return all(ref() is None for _, _, ref in worker._heap)

    until(collected)


def test_a_forked_child_serves_the_inherited_circuits_again(client: Any, key: str) -> None:
    """After fork only the forking thread survives: the hook starts a new sync thread."""
    worker = SyncWorker("test-fork")
    pipeline = shared(RedisCircuitStateStore(client), key)
    sync = pipeline.strategies[0]._controller.sync  # type: ignore[attr-defined]
    sync.due = time.monotonic() + 0.05
    worker._heap.append((sync.due, 0, weakref.ref(sync)))  # inherited, with no thread to serve it
    worker._after_fork_in_child()
    assert worker._thread is not None
    assert worker._thread.is_alive()
    empty = SyncWorker("test-fork-empty")
    empty._after_fork_in_child()
    assert empty._thread is None  # nothing to serve: started on first use


async def test_the_async_only_strategy_refuses_a_direct_sync_call(redis_server: RedisServer, key: str) -> None:
    """Used without a pipeline, the strategy itself refuses a sync execution too."""
    async_client = redis.asyncio.Redis(port=redis_server.port)
    pipeline = shared(RedisCircuitStateStore(async_client=async_client), key)
    strategy = pipeline.strategies[0]
    with pytest.raises(ValidationError, match="sync client"):
        strategy.execute(lambda _context: None, None)  # type: ignore[arg-type]
    await async_client.aclose()


async def test_closing_the_store_stops_its_circuits_syncing(redis_server: RedisServer, client: Any, key: str) -> None:
    """After close()/aclose() the circuits decide alone; nothing talks to Redis any more."""
    async_client = redis.asyncio.Redis(port=redis_server.port)
    async_store = RedisCircuitStateStore(async_client=async_client)
    async_pipeline = shared(async_store, key)
    assert await async_pipeline.execute_async(_ok) == "ok"
    await async_store.aclose()
    assert async_store.closed
    assert await async_pipeline.execute_async(_ok) == "ok"  # no new task: local from now on
    assert not async_pipeline.strategies[0]._controller.core.shared  # type: ignore[attr-defined]
    sync_store = RedisCircuitStateStore(client)
    sync_pipeline = shared(sync_store, f"{key}-sync")
    sync_store.close()
    until(lambda: not sync_pipeline.strategies[0]._controller.core.shared)  # type: ignore[attr-defined]
    await async_client.aclose()


async def test_a_sync_outliving_its_circuit_does_nothing(client: Any, key: str) -> None:
    """A sync whose pipeline was dropped (the worker may still hold it) neither sends nor applies."""
    pipeline = shared(RedisCircuitStateStore(client), key)
    sync = pipeline.strategies[0]._controller.sync  # type: ignore[attr-defined]
    del pipeline
    gc.collect()
    assert not sync.alive
    sync.run_once()
    await sync.run_once_async()
    sync.answered(CircuitReply(1, 9, 1.0, False, False))
    sync.failed(ConnectionError("gone"))
    sync.failed(None)  # the store closed
    await _serve_async(weakref.ref(sync), asyncio.Event())  # returns at once


def test_closing_the_pipeline_stops_its_sync(client: Any, key: str) -> None:
    """`close()` stops the circuit's exchanges; the store's thread ends with its last circuit,
    and a circuit of another pipeline on the same store keeps syncing until it closes too."""
    store = RedisCircuitStateStore(client)
    kept, closed = shared(store, f"{key}-kept"), shared(store, key)
    assert closed.execute(lambda: "ok") == "ok"
    worker = _WORKERS[store]
    closed.close()
    before = client.hget(f"circuit:{key}", "ep"), client.pttl(f"circuit:{key}")
    time.sleep(0.3)  # six intervals: an exchange would have refreshed the key's expiry
    assert client.pttl(f"circuit:{key}") <= before[1]
    until(lambda: client.exists(f"circuit:{key}-kept") == 1)
    assert worker._thread is not None  # still serving the other pipeline's circuit
    kept.close()
    until(lambda: worker._thread is None)
    with pytest.raises(ValidationError, match="pipeline closed"):
        kept.execute(lambda: "ok")


async def test_closing_stops_the_sync_task_of_an_asyncio_only_store(redis_server: RedisServer, key: str) -> None:
    async_client = redis.asyncio.Redis(port=redis_server.port)
    pipeline = shared(RedisCircuitStateStore(async_client=async_client), key)

    async def ok() -> str:
        return "ok"

    assert await pipeline.execute_async(ok) == "ok"
    sync = pipeline.strategies[0]._controller.sync  # type: ignore[attr-defined]
    task = sync._task
    assert task is not None
    assert not task.done()
    async with pipeline:
        pass
    await asyncio.wait({task}, timeout=2)
    assert task.cancelled()
    await async_client.aclose()
