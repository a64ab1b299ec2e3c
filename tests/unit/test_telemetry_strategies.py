"""Every event of every strategy reaches OpenTelemetry with its name, severity and tags (real SDK)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from resilience import BrokenCircuitError, ResiliencePipelineBuilder, TimeoutRejectedError
from resilience.stores import MemoryLockStore
from resilience.telemetry import TelemetryOptions
from resilience.testing import FakeTimeProvider


def counted(reader: InMemoryMetricReader) -> dict[tuple[str, str, str], dict[str, Any]]:
    """(event, severity, strategy) -> tags of resilience.strategy.events points."""
    found: dict[tuple[str, str, str], dict[str, Any]] = {}
    data = reader.get_metrics_data()
    assert data is not None
    for resource in data.resource_metrics:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                if metric.name != "resilience.strategy.events":
                    continue
                for point in metric.data.data_points:
                    attributes = dict(point.attributes)
                    key = (attributes["event.name"], attributes["event.severity"], attributes.get("strategy.name", ""))
                    found[key] = attributes
    return found


def histogram_names(reader: InMemoryMetricReader) -> set[str]:
    data = reader.get_metrics_data()
    assert data is not None
    return {m.name for r in data.resource_metrics for s in r.scope_metrics for m in s.metrics}


def build(reader: InMemoryMetricReader, clock: FakeTimeProvider, store: MemoryLockStore) -> Any:
    return (
        ResiliencePipelineBuilder(
            name="shop",
            instance_name="i-1",
            time_provider=clock,
            telemetry=TelemetryOptions(meter_provider=MeterProvider(metric_readers=[reader])),
        )
        .add_lock("cart", ttl=10, store=store)
        .add_retry(max_retries=1, delay=1, handle=ConnectionError)
        .add_circuit_breaker(failure_ratio=0.5, minimum_throughput=2, break_duration=5, handle=ConnectionError)
        .add_timeout(2)
        .build()
    )


EXPECTED = {
    ("OnRetry", "Warning", "Retry"),
    ("OnCircuitOpened", "Error", "CircuitBreaker"),
    ("OnLockAcquired", "Debug", "Lock"),
    ("OnLockReleased", "Debug", "Lock"),
    ("OnLockRejected", "Information", "Lock"),
}


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_every_strategy_event_is_counted_with_its_tags(mode: str) -> None:
    """Retry, breaker, timeout and lock events: names, default severities, strategy and exception tags."""
    reader = InMemoryMetricReader()
    clock = FakeTimeProvider(auto_advance=True)
    store = MemoryLockStore(clock)
    pipeline = build(reader, clock, store)

    def down() -> None:
        raise ConnectionError("down")

    async def adown() -> None:
        raise ConnectionError("down")

    if mode == "sync":
        outcome = pipeline.settle(down)  # fails, retries once, opens the circuit
        assert isinstance(outcome.error, BrokenCircuitError | ConnectionError)
    else:
        outcome = asyncio.run(pipeline.settle_async(adown))
        assert isinstance(outcome.error, BrokenCircuitError | ConnectionError)
    store.acquire("cart", "someone-else", 10)  # held elsewhere: the next execution is rejected
    assert pipeline.settle(lambda: None).error is not None
    store.release("cart", "someone-else")

    found = counted(reader)
    assert set(found) >= EXPECTED
    retry = found["OnRetry", "Warning", "Retry"]
    assert retry["exception.type"] == "ConnectionError"
    assert retry["pipeline.name"] == "shop"
    assert retry["pipeline.instance"] == "i-1"
    for tags in found.values():
        assert "lock.key" not in tags
        assert "operation.key" not in tags
    assert {
        "resilience.strategy.attempt.duration",
        "resilience.pipeline.duration",
        "resilience.lock.wait.duration",
        "resilience.lock.hold.duration",
    } <= histogram_names(reader)


def test_timeout_and_half_open_close_events() -> None:
    """OnTimeout (Error), OnCircuitHalfOpened (Warning) and OnCircuitClosed (Information)."""
    reader = InMemoryMetricReader()
    clock = FakeTimeProvider(auto_advance=True)
    pipeline = (
        ResiliencePipelineBuilder(
            name="t",
            time_provider=clock,
            telemetry=TelemetryOptions(meter_provider=MeterProvider(metric_readers=[reader])),
        )
        .add_circuit_breaker(failure_ratio=0.5, minimum_throughput=2, break_duration=1)
        .add_timeout(1)
        .build()
    )

    async def slow() -> None:
        await clock.sleep_async(5)

    for _ in range(2):
        with pytest.raises(TimeoutRejectedError):
            asyncio.run(pipeline.execute_async(slow))
    clock.advance(2)
    assert pipeline.execute(lambda: "probe") == "probe"
    found = counted(reader)
    assert ("OnTimeout", "Error", "Timeout") in found
    assert ("OnCircuitOpened", "Error", "CircuitBreaker") in found
    assert ("OnCircuitHalfOpened", "Warning", "CircuitBreaker") in found
    assert ("OnCircuitClosed", "Information", "CircuitBreaker") in found
    opened = found["OnCircuitOpened", "Error", "CircuitBreaker"]
    assert opened["exception.type"] == "resilience.exceptions.TimeoutRejectedError"


def test_no_telemetry_work_when_nothing_listens(monkeypatch: pytest.MonkeyPatch) -> None:
    """With no listener, provider, SDK or enabled logger, the success path builds no event at all."""
    import resilience.telemetry._source as source

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("an event was built although nothing listens")

    monkeypatch.setattr(source, "TelemetryEvent", refuse)
    clock = FakeTimeProvider(auto_advance=True)
    pipeline = (
        ResiliencePipelineBuilder(name="quiet", time_provider=clock)
        .add_lock("k", store=MemoryLockStore(clock))
        .add_retry()
        .add_circuit_breaker()
        .add_timeout(5)
        .build()
    )
    assert pipeline.execute(lambda: 7) == 7

    async def seven() -> int:
        return 7

    assert asyncio.run(pipeline.execute_async(seven)) == 7
