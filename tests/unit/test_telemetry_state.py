"""The state metrics with the real SDK: leases held, circuit states, limiter permits in use and queued.

Each is read from its owner when the reader collects (DESIGN §2.25), so the tests collect in
the middle of an execution and after it.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from resilience import RateLimiterRejectedError, ResiliencePipelineBuilder, get_context
from resilience.stores import MemoryLockStore, MemorySemaphoreStore
from resilience.strategies import CircuitBreakerManualControl
from resilience.telemetry import TelemetryOptions
from resilience.testing import FakeTimeProvider


def state(reader: InMemoryMetricReader, name: str) -> dict[tuple[tuple[str, Any], ...], float]:
    """The points of one state metric now: sorted attributes -> value."""
    data = reader.get_metrics_data()
    found: dict[tuple[tuple[str, Any], ...], float] = {}
    if data is None:
        return found
    for resource in data.resource_metrics:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                if metric.name == name:
                    for point in metric.data.data_points:
                        found[tuple(sorted((point.attributes or {}).items()))] = point.value
    return found


def only(reader: InMemoryMetricReader, name: str) -> tuple[dict[str, Any], float]:
    ((attributes, value),) = state(reader, name).items()
    return dict(attributes), value


def until(predicate: Any, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "not reached in time"
        time.sleep(0.005)


def options(reader: InMemoryMetricReader) -> TelemetryOptions:
    return TelemetryOptions(meter_provider=MeterProvider(metric_readers=[reader]))


def test_state_metrics_are_there_from_the_build_with_their_units() -> None:
    """Built pipelines show their state at the first collection, before any execution; units as documented."""
    reader = InMemoryMetricReader()
    pipeline = (  # noqa: F841 - kept alive: the state is read from the live pipeline
        ResiliencePipelineBuilder(name="built", telemetry=options(reader))
        .add_concurrency_limiter(2)
        .add_circuit_breaker()
        .add_lock("k", store=MemoryLockStore())
        .build()
    )
    data = reader.get_metrics_data()
    assert data is not None
    units = {m.name: m.unit for r in data.resource_metrics for s in r.scope_metrics for m in s.metrics}
    assert units == {
        "resilience.lock.held": "{lease}",
        "resilience.circuit.state": "{state}",
        "resilience.limiter.in_use": "{permit}",
        "resilience.limiter.queued": "{caller}",
    }
    assert only(reader, "resilience.circuit.state") == (
        {"pipeline.name": "built", "strategy.name": "CircuitBreaker"},
        0,
    )
    assert only(reader, "resilience.lock.held") == (
        {"pipeline.name": "built", "strategy.name": "Lock", "lock.mode": "exclusive"},
        0,
    )


@pytest.mark.parametrize("mode", ["sync", "async"])
async def test_lock_held_counts_the_lease_while_the_callable_runs(mode: str) -> None:
    """`resilience.lock.held` is 1 inside the lock strategy's execution, 0 once released."""
    reader = InMemoryMetricReader()
    pipeline = ResiliencePipelineBuilder(name="nightly", telemetry=options(reader)).add_lock("report").build()
    tags = {"pipeline.name": "nightly", "strategy.name": "Lock", "lock.mode": "exclusive"}
    inside: list[tuple[dict[str, Any], float]] = []
    if mode == "sync":
        pipeline.execute(lambda: inside.append(only(reader, "resilience.lock.held")))
    else:

        async def body() -> None:
            inside.append(only(reader, "resilience.lock.held"))

        await pipeline.execute_async(body)
    assert inside == [(tags, 1)]
    assert only(reader, "resilience.lock.held") == (tags, 0)


class AnsweringFalse(MemoryLockStore):
    def renew(self, key: str, owner: str, ttl: float) -> bool:
        return False


@pytest.mark.parametrize("mode", ["sync", "async"])
async def test_a_lost_lease_is_no_longer_held(mode: str) -> None:
    """A lease lost under its holder leaves `resilience.lock.held` (the loss, not a release, takes it off)."""
    reader = InMemoryMetricReader()
    pipeline = (
        ResiliencePipelineBuilder(name="lossy", telemetry=options(reader))
        .add_lock(f"lost-{uuid.uuid4().hex}", ttl=0.3, store=AnsweringFalse())
        .build()
    )
    held: list[float] = []

    def wait_for_loss() -> None:
        context = get_context()
        assert context is not None
        held.append(only(reader, "resilience.lock.held")[1])
        assert context.signal.wait(5)

    async def wait_for_loss_async() -> None:
        context = get_context()
        assert context is not None
        held.append(only(reader, "resilience.lock.held")[1])
        assert await context.signal.wait_async(5)

    if mode == "sync":
        pipeline.settle(wait_for_loss)
    else:
        await pipeline.settle_async(wait_for_loss_async)
    assert held == [1]
    assert only(reader, "resilience.lock.held")[1] == 0


def test_primitives_count_their_holds_by_mode() -> None:
    """Locks and semaphore permits taken through the primitives count under their mode (global provider)."""
    code = textwrap.dedent(
        """
        import asyncio
        from opentelemetry import metrics
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import InMemoryMetricReader
        reader = InMemoryMetricReader()
        metrics.set_meter_provider(MeterProvider(metric_readers=[reader]))
        from resilience.primitives import lock, semaphore
        from resilience.stores import MemoryLockStore, MemorySemaphoreStore

        def held():
            data = reader.get_metrics_data()
            return sorted(
                (p.attributes["strategy.name"], p.attributes["lock.mode"], p.value)
                for r in data.resource_metrics for s in r.scope_metrics for m in s.metrics
                if m.name == "resilience.lock.held" for p in m.data.data_points
            )

        locks = lock(MemoryLockStore())
        permits = semaphore(MemorySemaphoreStore(), limit=3)
        with locks.hold("a"), permits.hold("b"), permits.hold("b"):
            print(held())

        async def main():
            async with locks.hold("a"), permits.hold("b"):
                print(held())
        asyncio.run(main())
        print(held())
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout.splitlines() == [
        "[('Lock', 'exclusive', 1), ('Semaphore', 'semaphore', 2)]",
        "[('Lock', 'exclusive', 1), ('Semaphore', 'semaphore', 1)]",
        "[('Lock', 'exclusive', 0), ('Semaphore', 'semaphore', 0)]",
    ]


@pytest.mark.parametrize("mode", ["sync", "async"])
async def test_circuit_state_follows_the_circuit(mode: str) -> None:
    """0 closed, 2 open, 1 half-open (during the probe), 0 closed again, 3 isolated."""
    reader = InMemoryMetricReader()
    clock = FakeTimeProvider()
    control = CircuitBreakerManualControl()
    pipeline = (
        ResiliencePipelineBuilder(name="payments", time_provider=clock, telemetry=options(reader))
        .add_circuit_breaker(
            failure_ratio=0.5, minimum_throughput=2, break_duration=5, handle=ConnectionError, manual_control=control
        )
        .build()
    )

    def now() -> float:
        attributes, value = only(reader, "resilience.circuit.state")
        assert attributes == {"pipeline.name": "payments", "strategy.name": "CircuitBreaker"}
        return value

    def fail() -> None:
        raise ConnectionError

    async def fail_async() -> None:
        raise ConnectionError

    seen = [now()]
    for _ in range(2):
        if mode == "sync":
            pipeline.settle(fail)
        else:
            await pipeline.settle_async(fail_async)
    seen.append(now())
    clock.advance(5)
    if mode == "sync":
        pipeline.execute(lambda: seen.append(now()))
    else:

        async def probe() -> None:
            seen.append(now())

        await pipeline.execute_async(probe)
    seen.append(now())
    if mode == "sync":
        control.isolate()
    else:
        await control.isolate_async()
    seen.append(now())
    assert seen == [0, 2, 1, 0, 3]


def test_two_circuits_under_one_name_report_the_worst() -> None:
    """Two live circuits with the same tags (two builds of one pipeline) report the highest state."""
    reader = InMemoryMetricReader()
    telemetry = options(reader)
    builder = ResiliencePipelineBuilder(name="twice", telemetry=telemetry).add_circuit_breaker(
        minimum_throughput=2, failure_ratio=0.5, handle=ConnectionError
    )
    first, second = builder.build(), builder.build()

    def fail() -> None:
        raise ConnectionError

    for _ in range(2):
        second.settle(fail)
    assert only(reader, "resilience.circuit.state")[1] == 2
    del second
    import gc

    gc.collect()
    assert only(reader, "resilience.circuit.state")[1] == 0  # a collected circuit leaves the metric
    assert first is not None


def test_limiter_in_use_and_queued_in_process() -> None:
    """A holder and a queued caller: in_use 1 and queued 1; both 0 once they are done."""
    reader = InMemoryMetricReader()
    pipeline = (
        ResiliencePipelineBuilder(name="pool", telemetry=options(reader))
        .add_concurrency_limiter(1, queue=1, wait=30)
        .build()
    )
    tags = {"pipeline.name": "pool", "strategy.name": "ConcurrencyLimiter"}
    release = threading.Event()
    holding = threading.Event()

    def hold() -> None:
        holding.set()
        assert release.wait(30)

    holder = threading.Thread(target=pipeline.execute, args=(hold,))
    holder.start()
    assert holding.wait(30)
    waiter = threading.Thread(target=pipeline.execute, args=(lambda: None,))
    waiter.start()
    until(lambda: only(reader, "resilience.limiter.queued") == (tags, 1))
    assert only(reader, "resilience.limiter.in_use") == (tags, 1)
    release.set()
    holder.join(30)
    waiter.join(30)
    assert only(reader, "resilience.limiter.in_use") == (tags, 0)
    assert only(reader, "resilience.limiter.queued") == (tags, 0)


async def test_limiter_in_use_and_queued_in_process_async() -> None:
    """The asyncio twin: a holding task and a queued task."""
    reader = InMemoryMetricReader()
    pipeline = (
        ResiliencePipelineBuilder(name="pool", telemetry=options(reader))
        .add_concurrency_limiter(2, queue=1, wait=30)
        .build()
    )
    release = asyncio.Event()

    async def hold() -> None:
        await release.wait()

    holders = [asyncio.ensure_future(pipeline.execute_async(hold)) for _ in range(3)]
    await asyncio.sleep(0)  # each task takes a permit or joins the queue before its first wait
    assert only(reader, "resilience.limiter.in_use")[1] == 2
    assert only(reader, "resilience.limiter.queued")[1] == 1
    release.set()
    await asyncio.gather(*holders)
    assert only(reader, "resilience.limiter.in_use")[1] == 0
    assert only(reader, "resilience.limiter.queued")[1] == 0


@pytest.mark.parametrize("mode", ["sync", "async"])
async def test_store_backed_limiter_counts_its_leases_and_its_waiters(mode: str) -> None:
    """Over a semaphore store: a held permit is in use (and a `semaphore` lease), a caller waiting for one is queued."""
    reader = InMemoryMetricReader()
    store = MemorySemaphoreStore()
    pipeline = (
        ResiliencePipelineBuilder(name="fleet", telemetry=options(reader))
        .add_concurrency_limiter(1, store=store, wait=30)
        .build()
    )
    tags = {"pipeline.name": "fleet", "strategy.name": "ConcurrencyLimiter"}
    release = threading.Event()
    holding = threading.Event()

    def hold() -> None:
        holding.set()
        assert release.wait(30)

    holder = threading.Thread(target=pipeline.execute, args=(hold,))
    holder.start()
    assert holding.wait(30)
    if mode == "sync":
        waiter = threading.Thread(target=pipeline.execute, args=(lambda: None,))
        waiter.start()
        until(lambda: only(reader, "resilience.limiter.queued") == (tags, 1))
    else:

        async def nothing() -> None:
            return None

        task = asyncio.ensure_future(pipeline.execute_async(nothing))
        deadline = time.monotonic() + 10
        while only(reader, "resilience.limiter.queued") != (tags, 1):
            assert time.monotonic() < deadline, "not queued in time"
            await asyncio.sleep(0.005)
    assert only(reader, "resilience.limiter.in_use") == (tags, 1)
    assert only(reader, "resilience.lock.held") == ({**tags, "lock.mode": "semaphore"}, 1)
    release.set()
    holder.join(30)
    if mode == "sync":
        waiter.join(30)
    else:
        await task
    assert only(reader, "resilience.limiter.in_use") == (tags, 0)
    assert only(reader, "resilience.limiter.queued") == (tags, 0)


def test_a_rejected_caller_is_not_left_queued() -> None:
    """A full queue rejects: nothing stays counted."""
    reader = InMemoryMetricReader()
    pipeline = ResiliencePipelineBuilder(name="tight", telemetry=options(reader)).add_concurrency_limiter(1).build()

    def nested() -> None:
        with pytest.raises(RateLimiterRejectedError):
            pipeline.execute(lambda: None)
        assert only(reader, "resilience.limiter.in_use")[1] == 1

    pipeline.execute(nested)
    assert only(reader, "resilience.limiter.in_use")[1] == 0
    assert only(reader, "resilience.limiter.queued")[1] == 0


def test_state_metrics_cost_no_import_without_an_sdk() -> None:
    """Building and running a circuit, a lock and a limiter imports no OpenTelemetry when no SDK is installed."""
    code = textwrap.dedent(
        """
        import sys
        from resilience import ResiliencePipelineBuilder
        from resilience.stores import MemoryLockStore
        pipeline = (
            ResiliencePipelineBuilder(name="p").add_concurrency_limiter(2).add_circuit_breaker()
            .add_lock("k", store=MemoryLockStore()).build()
        )
        assert pipeline.execute(lambda: 41) == 41
        assert not any(m.startswith("opentelemetry") for m in sys.modules), sorted(sys.modules)
        print("clean")
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout.strip() == "clean"


@pytest.mark.redis
def test_a_shared_circuit_is_tagged_with_its_key(redis_server: Any) -> None:
    """A circuit shared through a store carries `circuit.key` beside its pipeline and strategy names."""
    import redis

    from resilience.stores import RedisCircuitStateStore

    reader = InMemoryMetricReader()
    client = redis.Redis(port=redis_server.port)
    key = f"payments-{uuid.uuid4().hex[:8]}"
    try:
        pipeline = (
            ResiliencePipelineBuilder(name="fleet", telemetry=options(reader))
            .add_circuit_breaker(state_store=RedisCircuitStateStore(client), circuit_key=key)
            .build()
        )
        pipeline.execute(lambda: None)
        assert only(reader, "resilience.circuit.state") == (
            {"pipeline.name": "fleet", "strategy.name": "CircuitBreaker", "circuit.key": key},
            0,
        )
    finally:
        client.close()
