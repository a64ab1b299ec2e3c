"""What each event carries with the real SDK: `error.type`, span-event facts, versions, exemplars, log extras."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from resilience import (
    LockNotAcquiredError,
    RateLimiterRejectedError,
    ResiliencePipeline,
    ResiliencePipelineBuilder,
    TimeoutRejectedError,
    get_context,
)
from resilience._version import __version__
from resilience.stores import MemoryLockStore, MemorySemaphoreStore
from resilience.telemetry import TelemetryOptions
from resilience.testing import FakeTimeProvider, capture_events


def traced() -> tuple[InMemorySpanExporter, TracerProvider]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return exporter, provider


def metric_points(reader: InMemoryMetricReader, name: str) -> list[Any]:
    data = reader.get_metrics_data()
    assert data is not None
    return [
        point
        for resource in data.resource_metrics
        for scope in resource.scope_metrics
        for metric in scope.metrics
        if metric.name == name
        for point in metric.data.data_points
    ]


def failing_pipeline(clock: FakeTimeProvider, **telemetry: Any) -> ResiliencePipeline:
    """Lock, then a retry of one, around a circuit that opens on the second failure."""
    return (
        ResiliencePipelineBuilder(name="facts", time_provider=clock, telemetry=TelemetryOptions(**telemetry))
        .add_lock("facts-key", store=MemoryLockStore(clock))
        .add_retry(max_retries=1, delay=1.5, backoff="constant", jitter=False, handle=ConnectionError)
        .add_circuit_breaker(failure_ratio=0.5, minimum_throughput=2, break_duration=7, handle=ConnectionError)
        .build()
    )


def refused() -> None:
    raise ConnectionRefusedError("refused")


async def refused_async() -> None:
    raise ConnectionRefusedError("refused")


async def settle(pipeline: ResiliencePipeline, mode: str) -> None:
    if mode == "sync":
        pipeline.settle(refused)
    else:
        await pipeline.settle_async(refused_async)


@pytest.mark.parametrize("mode", ["sync", "async"])
async def test_span_events_carry_their_facts(mode: str) -> None:
    """Attempts (number, handled, duration), the retry delay, the break duration, lock key/token/mode, error.type."""
    exporter, tracer_provider = traced()
    clock = FakeTimeProvider(auto_advance=True)
    pipeline = failing_pipeline(clock, tracer_provider=tracer_provider)
    with tracer_provider.get_tracer("test").start_as_current_span("request"):
        await settle(pipeline, mode)
    (span,) = exporter.get_finished_spans()
    events = [(e.name, dict(e.attributes or {})) for e in span.events]
    by_name: dict[str, list[dict[str, Any]]] = {}
    for name, attributes in events:
        by_name.setdefault(name, []).append(attributes)
    refused_type = "ConnectionRefusedError"
    first, second = by_name["ExecutionAttempt"]
    assert (first["attempt.number"], first["attempt.handled"], first["attempt.duration"]) == (0, True, 0.0)
    assert (second["attempt.number"], second["attempt.handled"]) == (1, True)
    assert first["error.type"] == first["exception.type"] == refused_type
    (retry,) = by_name["OnRetry"]
    assert (retry["attempt.number"], retry["retry.delay"], retry["error.type"]) == (0, 1.5, refused_type)
    (opened,) = by_name["OnCircuitOpened"]
    assert (opened["circuit.break_duration"], opened["error.type"]) == (7.0, refused_type)
    (acquired,) = by_name["OnLockAcquired"]
    (released,) = by_name["OnLockReleased"]
    for lock_event in (acquired, released):
        assert lock_event["lock.key"] == "facts-key"
        assert lock_event["lock.mode"] == "exclusive"
        assert isinstance(lock_event["lock.token"], int)
        assert "error.type" not in lock_event
    assert acquired["lock.token"] == released["lock.token"]
    (executed,) = by_name["PipelineExecuted"]
    assert executed["error.type"] == refused_type
    for _, attributes in events:
        assert all(isinstance(value, str | int | float) for value in attributes.values()), attributes


@pytest.mark.parametrize("mode", ["sync", "async"])
async def test_rejections_carry_the_error_they_raise(mode: str) -> None:
    """OnTimeout, OnRateLimiterRejected and OnLockRejected name the library's error they end in."""
    reader = InMemoryMetricReader()
    telemetry = TelemetryOptions(meter_provider=MeterProvider(metric_readers=[reader]))
    clock = FakeTimeProvider(auto_advance=True)
    store = MemoryLockStore(clock)
    timeout = ResiliencePipelineBuilder(name="t", time_provider=clock, telemetry=telemetry).add_timeout(1).build()
    limited = (
        ResiliencePipelineBuilder(name="r", time_provider=clock, telemetry=telemetry)
        .add_rate_limiter(1, per=60, burst=1)
        .build()
    )
    locked = (
        ResiliencePipelineBuilder(name="l", time_provider=clock, telemetry=telemetry).add_lock("k", store=store).build()
    )

    def slow() -> None:
        context = get_context()
        assert context is not None
        clock.sleep(2)
        context.signal.raise_if_aborted()

    async def slow_async() -> None:
        await clock.sleep_async(2)

    async def nothing() -> None:
        return None

    def contend() -> None:
        with pytest.raises(LockNotAcquiredError):
            locked.execute(lambda: None)

    async def contend_async() -> None:
        with pytest.raises(LockNotAcquiredError):
            await locked.execute_async(nothing)

    if mode == "sync":
        assert isinstance(timeout.settle(slow).error, TimeoutRejectedError)
        limited.execute(lambda: None)
        assert isinstance(limited.settle(lambda: None).error, RateLimiterRejectedError)
        locked.execute(contend)
    else:
        assert isinstance((await timeout.settle_async(slow_async)).error, TimeoutRejectedError)
        await limited.execute_async(nothing)
        assert isinstance((await limited.settle_async(nothing)).error, RateLimiterRejectedError)
        await locked.execute_async(contend_async)
    counted = {p.attributes["event.name"]: p.attributes for p in metric_points(reader, "resilience.strategy.events")}
    assert counted["OnTimeout"]["error.type"] == "resilience.exceptions.TimeoutRejectedError"
    assert counted["OnRateLimiterRejected"]["error.type"] == "resilience.exceptions.RateLimiterRejectedError"
    assert counted["OnLockRejected"]["error.type"] == "resilience.exceptions.LockNotAcquiredError"
    assert all("exception.type" not in attributes for attributes in counted.values())  # Polly's: outcome errors only
    executed = {
        p.attributes["pipeline.name"]: p.attributes for p in metric_points(reader, "resilience.pipeline.duration")
    }
    assert executed["t"]["error.type"] == "resilience.exceptions.TimeoutRejectedError"


class AnsweringFalse(MemoryLockStore):
    def renew(self, key: str, owner: str, ttl: float) -> bool:
        return False


@pytest.mark.parametrize(
    ("mode", "error"),
    [("exclusive", "LockLostError"), ("shared", "LockLostError"), ("semaphore", "SemaphoreLeaseLostError")],
)
def test_a_lost_lease_names_its_error_and_mode(mode: str, error: str) -> None:
    """OnLockLost: `error.type` is the loss error of a lock or of a semaphore permit; the span event has the mode."""
    reader = InMemoryMetricReader()
    exporter, tracer_provider = traced()
    telemetry = TelemetryOptions(meter_provider=MeterProvider(metric_readers=[reader]), tracer_provider=tracer_provider)
    builder = ResiliencePipelineBuilder(name="lossy", telemetry=telemetry)
    if mode != "semaphore":
        builder = builder.add_lock("lossy", ttl=0.3, store=AnsweringFalse(), shared=mode == "shared")
    else:

        class PermitAnsweringFalse(MemorySemaphoreStore):
            def renew(self, key: str, owner: str, ttl: float) -> bool:
                return False

        builder = builder.add_concurrency_limiter(1, ttl=0.3, store=PermitAnsweringFalse())
    pipeline = builder.build()

    def until_lost() -> None:
        context = get_context()
        assert context is not None
        assert context.signal.wait(5)

    with tracer_provider.get_tracer("test").start_as_current_span("request"):
        pipeline.settle(until_lost)
    events = [p.attributes for p in metric_points(reader, "resilience.strategy.events")]
    (lost,) = [attributes for attributes in events if attributes["event.name"] == "OnLockLost"]
    assert lost["error.type"] == f"resilience.exceptions.{error}"
    (span,) = exporter.get_finished_spans()
    (event,) = [e for e in span.events if e.name == "OnLockLost"]
    assert event.attributes is not None
    assert event.attributes["lock.mode"] == mode


def test_meter_and_tracer_carry_the_library_version() -> None:
    """`otel_scope_version` is the library's version, on metrics and on execution spans."""
    reader = InMemoryMetricReader()
    exporter, tracer_provider = traced()
    pipeline = (
        ResiliencePipelineBuilder(
            name="v",
            telemetry=TelemetryOptions(
                meter_provider=MeterProvider(metric_readers=[reader]),
                tracer_provider=tracer_provider,
                trace_executions=True,
            ),
        )
        .add_retry(max_retries=1, delay=0)
        .build()
    )
    pipeline.execute(lambda: None)
    data = reader.get_metrics_data()
    assert data is not None
    scopes = {(s.scope.name, s.scope.version) for r in data.resource_metrics for s in r.scope_metrics}
    assert scopes == {("resilience", __version__)}
    spans = exporter.get_finished_spans()
    assert {(s.instrumentation_scope.name, s.instrumentation_scope.version) for s in spans} == {  # type: ignore[union-attr]
        ("resilience", __version__)
    }


@pytest.mark.parametrize("mode", ["sync", "async"])
async def test_histograms_carry_exemplars_inside_a_sampled_span(mode: str) -> None:
    """With the SDK's default (trace-based) exemplar filter, durations recorded in a span link to it."""
    reader = InMemoryMetricReader()
    _, tracer_provider = traced()
    clock = FakeTimeProvider(auto_advance=True)
    pipeline = failing_pipeline(
        clock, meter_provider=MeterProvider(metric_readers=[reader]), tracer_provider=tracer_provider
    )
    with tracer_provider.get_tracer("test").start_as_current_span("request") as span:
        await settle(pipeline, mode)
    trace_id = span.get_span_context().trace_id
    data = reader.get_metrics_data()  # one collection: exemplars belong to the interval they were taken in
    assert data is not None
    histograms = {"resilience.pipeline.duration", "resilience.strategy.attempt.duration"}
    points = [
        (metric.name, point)
        for resource in data.resource_metrics
        for scope in resource.scope_metrics
        for metric in scope.metrics
        if metric.name in histograms
        for point in metric.data.data_points
    ]
    assert {name for name, _ in points} == histograms
    for name, point in points:
        assert [exemplar.trace_id for exemplar in point.exemplars] == [trace_id], name
    pipeline.settle(refused)  # outside any span: batched, no exemplar to take
    executed = metric_points(reader, "resilience.pipeline.duration")
    assert sum(point.count for point in executed) == 2
    assert all(point.exemplars == [] for point in executed)


def _logged(caplog: pytest.LogCaptureFixture, run: Callable[[], object]) -> list[logging.LogRecord]:
    with caplog.at_level(logging.DEBUG, logger="resilience"):
        run()
    return [r for r in caplog.records if r.name == "resilience"]


def test_log_extras_are_plain_and_named_as_in_spans(caplog: pytest.LogCaptureFixture) -> None:
    """`extra` holds only str/int/float/bool under the span events' names; no None, no objects."""
    clock = FakeTimeProvider(auto_advance=True)
    records = _logged(caplog, lambda: failing_pipeline(clock).settle(refused))
    standard = set(vars(logging.makeLogRecord({}))) | {"message", "asctime"}
    names = [r.__dict__["event.name"] for r in records]
    assert names[:3] == ["PipelineExecuting", "OnLockAcquired", "ExecutionAttempt"]
    for record in records:
        extra = {k: v for k, v in vars(record).items() if k not in standard}
        assert all(type(value) in {str, int, float, bool} for value in extra.values()), extra
        assert {"event.name", "event.severity", "pipeline.name"} <= set(extra)
    retry = next(r for r in records if r.__dict__["event.name"] == "OnRetry")
    assert retry.__dict__["error.type"] == "ConnectionRefusedError"
    assert retry.__dict__["retry.delay"] == 1.5
    acquired = next(r for r in records if r.__dict__["event.name"] == "OnLockAcquired")
    assert acquired.__dict__["lock.key"] == "facts-key"
    assert "operation.key" not in acquired.__dict__  # None is left out
    # A dotted name is a valid %-style key; only the formatter's up-front check wants \w+.
    formatted = logging.Formatter("%(event.name)s %(pipeline.name)s", validate=False).format(retry)
    assert formatted == "OnRetry facts"


# The SDK's own handler: deprecated in favour of opentelemetry-instrumentation-logging's, which
# wraps the same conversion of a record's `extra` into log attributes.
@pytest.mark.filterwarnings("ignore:.*LoggingHandler.*:DeprecationWarning")
def test_the_opentelemetry_logging_bridge_takes_the_records_without_warnings(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Bridged to OTel Logs, every event exports its attributes and the SDK warns about none of them."""
    from opentelemetry.sdk._logs import LoggerProvider, LoggingHandler
    from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter, SimpleLogRecordProcessor

    exporter = InMemoryLogRecordExporter()
    provider = LoggerProvider()
    provider.add_log_record_processor(SimpleLogRecordProcessor(exporter))
    handler = LoggingHandler(level=logging.DEBUG, logger_provider=provider)
    logger = logging.getLogger("resilience")
    logger.addHandler(handler)
    clock = FakeTimeProvider(auto_advance=True)
    try:
        with caplog.at_level(logging.DEBUG), capture_events() as events:
            failing_pipeline(clock).settle(refused)
    finally:
        logger.removeHandler(handler)
        provider.shutdown()
    warnings = [r.getMessage() for r in caplog.records if r.name.startswith("opentelemetry")]
    assert warnings == []
    exported = [dict(data.log_record.attributes or {}) for data in exporter.get_finished_logs()]
    assert [a["event.name"] for a in exported] == [e.name for e in events]
    (retry,) = [a for a in exported if a["event.name"] == "OnRetry"]
    assert retry["error.type"] == "ConnectionRefusedError"
