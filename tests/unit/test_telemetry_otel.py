"""OpenTelemetry export with the real SDK: instruments, tags, span events, execution spans."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any, TypeVar

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from resilience import Err, PipelineBuilder, ResilienceContext, ResiliencePipeline, use_context
from resilience.strategies import Strategy, StrategyBuildContext
from resilience.telemetry import Severity, TelemetryEvent, TelemetryOptions
from resilience.testing import FakeTimeProvider, capture_events

T = TypeVar("T")


class RedisDown(ConnectionError):
    pass


@dataclass(frozen=True)
class AttemptArgs:
    attempt: int
    duration: float
    handled: bool


@dataclass(frozen=True)
class LockArgs:
    key: str
    wait_duration: float | None = None
    hold_duration: float | None = None


EMITTED: list[tuple[str, Severity, object, Any]] = [
    ("ExecutionAttempt", Severity.WARNING, AttemptArgs(0, 0.25, True), Err(RedisDown("x"))),
    ("OnRetry", Severity.WARNING, None, Err(RedisDown("x"))),
    ("ExecutionAttempt", Severity.INFORMATION, AttemptArgs(1, 0.5, False), None),
    ("OnLockAcquired", Severity.DEBUG, LockArgs("order:1", wait_duration=0.125), None),
    ("OnLockReleased", Severity.DEBUG, LockArgs("order:1", hold_duration=2.0), None),
    ("OnLockRejected", Severity.INFORMATION, LockArgs("order:2", wait_duration=1.0), None),
    ("OnLockLost", Severity.ERROR, LockArgs("order:3", hold_duration=30.0), None),
]


@dataclass(frozen=True)
class Emitter:
    """A strategy that emits a fixed list of events around the inner call."""

    events: list[tuple[str, Severity, object, Any]]
    name: str = "Emitter"

    def validate(self, context: StrategyBuildContext, /) -> Iterable[str]:
        return ()

    def create(self, context: StrategyBuildContext, /) -> Strategy:
        return _EmitterStrategy(self.events, context)


class _EmitterStrategy:
    def __init__(self, events: list[tuple[str, Severity, object, Any]], built: StrategyBuildContext) -> None:
        self.events = events
        self.telemetry = built.telemetry

    def _emit(self, context: ResilienceContext) -> None:
        for name, severity, arguments, outcome in self.events:
            self.telemetry.emit(
                name, severity, operation_key=context.operation_key, outcome=outcome, arguments=arguments
            )

    def execute(self, callback: Callable[[ResilienceContext], T], context: ResilienceContext, /) -> T:
        self._emit(context)
        return callback(context)

    async def execute_async(
        self, callback: Callable[[ResilienceContext], Awaitable[T]], context: ResilienceContext, /
    ) -> T:
        self._emit(context)
        return await callback(context)


@pytest.fixture
def reader() -> InMemoryMetricReader:
    return InMemoryMetricReader()


def metrics_of(reader: InMemoryMetricReader) -> dict[str, list[Any]]:
    data = reader.get_metrics_data()
    found: dict[str, list[Any]] = {}
    if data is None:
        return found
    for resource in data.resource_metrics:
        for scope in resource.scope_metrics:
            assert scope.scope.name == "resilience"
            for metric in scope.metrics:
                found[metric.name] = [metric.unit, *metric.data.data_points]
    return found


def build(reader: InMemoryMetricReader, **options: Any) -> ResiliencePipeline:
    provider = MeterProvider(metric_readers=[reader])
    return (
        PipelineBuilder(
            name="orders",
            instance_name="eu-1",
            time_provider=FakeTimeProvider(),
            telemetry=TelemetryOptions(meter_provider=provider, **options),
        )
        .add(Emitter(EMITTED))
        .build()
    )


def test_every_instrument_name_unit_and_tags(reader: InMemoryMetricReader) -> None:
    """The five instruments of DESIGN §2.11 with their units, values and tags."""
    pipeline = build(reader)
    with use_context(operation_key="op-1"):
        pipeline.execute(lambda: None)
    metrics = metrics_of(reader)
    assert set(metrics) == {
        "resilience.strategy.events",
        "resilience.strategy.attempt.duration",
        "resilience.pipeline.duration",
        "resilience.lock.wait.duration",
        "resilience.lock.hold.duration",
    }
    unit, *points = metrics["resilience.strategy.events"]
    assert unit == "{event}"
    counted = {p.attributes["event.name"]: p for p in points}
    assert set(counted) == {"OnRetry", "OnLockAcquired", "OnLockReleased", "OnLockRejected", "OnLockLost"}
    retry = counted["OnRetry"]
    assert retry.value == 1
    assert dict(retry.attributes) == {
        "event.name": "OnRetry",
        "event.severity": "Warning",
        "pipeline.name": "orders",
        "pipeline.instance": "eu-1",
        "strategy.name": "Emitter",
        "exception.type": "tests.unit.test_telemetry_otel.RedisDown",
        "error.type": "tests.unit.test_telemetry_otel.RedisDown",
    }
    for point in points:
        assert "operation.key" not in point.attributes
        assert "lock.key" not in point.attributes

    unit, *attempts = metrics["resilience.strategy.attempt.duration"]
    assert unit == "s"
    by_number = {p.attributes["attempt.number"]: p for p in attempts}
    assert by_number[0].sum == 0.25
    assert by_number[0].attributes["attempt.handled"] is True
    assert by_number[1].sum == 0.5
    assert by_number[1].attributes["attempt.handled"] is False
    assert "exception.type" not in by_number[1].attributes

    unit, pipeline_point = metrics["resilience.pipeline.duration"]
    assert unit == "s"
    assert pipeline_point.count == 1
    assert pipeline_point.attributes["event.name"] == "PipelineExecuted"

    _, *waits = metrics["resilience.lock.wait.duration"]
    assert sorted(p.sum for p in waits) == [0.125, 1.0]
    _, *holds = metrics["resilience.lock.hold.duration"]
    assert sorted(p.sum for p in holds) == [2.0, 30.0]


def test_operation_key_is_a_tag_only_when_asked(reader: InMemoryMetricReader) -> None:
    """tag_operation_key=True adds operation.key to metric tags."""
    pipeline = build(reader, tag_operation_key=True)
    with use_context(operation_key="op-1"):
        pipeline.execute(lambda: None)
    _, *points = metrics_of(reader)["resilience.strategy.events"]
    assert {p.attributes["operation.key"] for p in points} == {"op-1"}


async def test_async_executions_export_the_same(reader: InMemoryMetricReader) -> None:
    """The async path records the same instruments."""
    pipeline = build(reader)

    async def work() -> int:
        return 1

    await pipeline.execute_async(work)
    metrics = metrics_of(reader)
    assert metrics["resilience.pipeline.duration"][1].count == 1
    assert len(metrics["resilience.strategy.events"]) - 1 == 5


def test_severity_none_suppresses_metrics_spans_and_listeners(reader: InMemoryMetricReader) -> None:
    """A NONE severity keeps the event out of every sink."""
    seen: list[TelemetryEvent] = []
    pipeline = build(
        reader,
        listeners=[seen.append],
        severity_provider=lambda e: Severity.NONE if e.name.startswith("OnLock") else e.severity,
    )
    with capture_events() as captured:
        pipeline.execute(lambda: None)
    _, *points = metrics_of(reader)["resilience.strategy.events"]
    assert {p.attributes["event.name"] for p in points} == {"OnRetry"}
    assert "resilience.lock.wait.duration" not in metrics_of(reader)
    assert not any(e.name.startswith("OnLock") for e in seen)
    assert [e.name for e in captured] == [e.name for e in seen]


def test_span_events_on_the_current_span(reader: InMemoryMetricReader) -> None:
    """Inside a recording span every event becomes a span event with the same attributes and lock.key."""
    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    pipeline = build(reader, tracer_provider=tracer_provider)
    with tracer_provider.get_tracer("test").start_as_current_span("request"), use_context(operation_key="op-9"):
        pipeline.execute(lambda: None)
    (span,) = exporter.get_finished_spans()
    names = [e.name for e in span.events]
    assert names == ["PipelineExecuting", *[e[0] for e in EMITTED], "PipelineExecuted"]
    acquired = next(e for e in span.events if e.name == "OnLockAcquired")
    assert acquired.attributes is not None
    assert acquired.attributes["lock.key"] == "order:1"
    assert acquired.attributes["operation.key"] == "op-9"
    assert acquired.attributes["pipeline.name"] == "orders"


def test_trace_executions_wraps_each_execution_in_a_span(reader: InMemoryMetricReader) -> None:
    """trace_executions=True makes a span per execution, with the events on it and errors recorded."""
    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    pipeline = build(reader, trace_executions=True, tracer_provider=tracer_provider)
    pipeline.execute(lambda: None)
    with pytest.raises(KeyError):
        pipeline.execute(lambda: {}["x"])
    ok_span, failed_span = exporter.get_finished_spans()
    assert ok_span.name == "resilience.pipeline.execute"
    assert ok_span.attributes == {"pipeline.name": "orders", "pipeline.instance": "eu-1"}
    assert "OnRetry" in [e.name for e in ok_span.events]
    assert not failed_span.status.is_ok
    assert "exception" in [e.name for e in failed_span.events]


def test_no_sdk_means_no_export_work() -> None:
    """Without an SDK (in a fresh interpreter) nothing imports OpenTelemetry and nothing is exported."""
    code = textwrap.dedent(
        """
        import sys
        from resilience import PipelineBuilder
        pipeline = PipelineBuilder(name="p").build()
        assert pipeline.execute(lambda: 41) == 41
        assert not any(m.startswith("opentelemetry") for m in sys.modules), sorted(sys.modules)
        print("clean")
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout.strip() == "clean"


def test_the_global_sdk_provider_is_used_when_installed() -> None:
    """With global SDK providers (set once, in a fresh interpreter) events reach metrics and the current span."""
    code = textwrap.dedent(
        """
        from opentelemetry import metrics
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import InMemoryMetricReader
        from opentelemetry import trace
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
        reader = InMemoryMetricReader()
        metrics.set_meter_provider(MeterProvider(metric_readers=[reader]))
        exporter = InMemorySpanExporter()
        tracer_provider = TracerProvider()
        tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
        trace.set_tracer_provider(tracer_provider)
        from resilience import PipelineBuilder
        pipeline = PipelineBuilder(name="global").build()
        with trace.get_tracer("app").start_as_current_span("request"):
            pipeline.execute(lambda: None)
        data = reader.get_metrics_data()
        names = [m.name for r in data.resource_metrics for s in r.scope_metrics for m in s.metrics]
        print(names)
        print([e.name for e in exporter.get_finished_spans()[0].events])
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    assert "resilience.pipeline.duration" in out.stdout
    assert "['PipelineExecuting', 'PipelineExecuted']" in out.stdout


def test_a_global_provider_set_after_executions_without_one_is_used() -> None:
    """The quick "no global provider" answer, given while the API had none, does not outlive the providers set later."""
    code = textwrap.dedent(
        """
        from opentelemetry import metrics, trace
        from resilience import ResiliencePipelineBuilder
        pipeline = ResiliencePipelineBuilder(name="late").add_retry(handle=KeyError).build()
        assert pipeline.execute(lambda: 1) == 1  # API imported, no provider: the quick answer
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import InMemoryMetricReader
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
        reader = InMemoryMetricReader()
        metrics.set_meter_provider(MeterProvider(metric_readers=[reader]))
        exporter = InMemorySpanExporter()
        tracer_provider = TracerProvider()
        tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
        trace.set_tracer_provider(tracer_provider)
        with trace.get_tracer("app").start_as_current_span("request"):
            pipeline.execute(lambda: None)
        data = reader.get_metrics_data()
        names = [m.name for r in data.resource_metrics for s in r.scope_metrics for m in s.metrics]
        print(names)
        print([e.name for e in exporter.get_finished_spans()[0].events])
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    assert "resilience.pipeline.duration" in out.stdout
    assert "'PipelineExecuting'" in out.stdout


def test_capture_events_records_from_every_pipeline() -> None:
    """capture_events() sees events of pipelines it was not given, and stops at the block's end."""
    pipeline = PipelineBuilder(name="captured").build()
    with capture_events() as events:
        pipeline.execute(lambda: None)
    pipeline.execute(lambda: None)
    assert [(e.name, e.pipeline_name) for e in events] == [
        ("PipelineExecuting", "captured"),
        ("PipelineExecuted", "captured"),
    ]


def test_instruments_are_created_once_per_provider(reader: InMemoryMetricReader) -> None:
    """Two pipelines on one provider share the instruments; another provider gets its own."""
    from resilience.telemetry._otel import INSTRUMENTS

    provider = MeterProvider(metric_readers=[reader])
    assert INSTRUMENTS.get(provider) is INSTRUMENTS.get(provider)
    other = MeterProvider(metric_readers=[InMemoryMetricReader()])
    assert INSTRUMENTS.get(other) is not INSTRUMENTS.get(provider)
    assert INSTRUMENTS.get(provider) is INSTRUMENTS.get(provider)


def test_exception_type_is_fully_qualified() -> None:
    """Builtins by name, everything else by module and qualified name."""
    from resilience.telemetry._otel import exception_type

    assert exception_type(ValueError()) == "ValueError"
    assert exception_type(RedisDown()) == "tests.unit.test_telemetry_otel.RedisDown"


def test_retry_attempts_are_child_spans_and_measured_for_metrics(reader: InMemoryMetricReader) -> None:
    """With trace_executions each retry attempt is a child span; attempt durations reach the histogram."""
    from resilience import ResiliencePipelineBuilder

    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    clock = FakeTimeProvider(auto_advance=True)
    pipeline = (
        ResiliencePipelineBuilder(
            name="traced",
            time_provider=clock,
            telemetry=TelemetryOptions(
                meter_provider=MeterProvider(metric_readers=[reader]),
                tracer_provider=tracer_provider,
                trace_executions=True,
            ),
        )
        .add_retry(max_retries=2, delay=1)
        .build()
    )
    calls = iter([RedisDown("a"), RedisDown("b"), None])

    def flaky() -> str:
        clock.sleep(0.5)
        error = next(calls)
        if error is not None:
            raise error
        return "ok"

    assert pipeline.execute(flaky) == "ok"
    spans = exporter.get_finished_spans()
    attempts = [s for s in spans if s.name == "resilience.attempt"]
    (execution,) = [s for s in spans if s.name == "resilience.pipeline.execute"]
    assert [s.attributes["attempt.number"] for s in attempts] == [0, 1, 2]  # type: ignore[index]
    assert all(s.parent is not None and s.parent.span_id == execution.context.span_id for s in attempts)
    assert [e.name for e in execution.events].count("OnRetry") == 2
    _, *points = metrics_of(reader)["resilience.strategy.attempt.duration"]
    assert sorted((p.attributes["attempt.number"], p.sum) for p in points) == [(0, 0.5), (1, 0.5), (2, 0.5)]


def test_the_environment_is_read_once_for_a_meter_provider(monkeypatch: pytest.MonkeyPatch) -> None:
    """Whether OTEL_PYTHON_METER_PROVIDER names a provider is read at the first check, then kept."""
    from resilience.telemetry import _otel

    monkeypatch.setattr("opentelemetry.metrics._internal._METER_PROVIDER", None)  # none set in code
    monkeypatch.setattr(_otel, "_env_names_provider", None)
    monkeypatch.setenv("OTEL_PYTHON_METER_PROVIDER", "sdk_meter_provider")
    _otel._meter_provider(TelemetryOptions())
    assert _otel._env_names_provider is True
    monkeypatch.delenv("OTEL_PYTHON_METER_PROVIDER")
    _otel._meter_provider(TelemetryOptions())
    assert _otel._env_names_provider is True


def test_a_provider_named_by_the_environment_is_asked_for(monkeypatch: pytest.MonkeyPatch) -> None:
    """With no global provider set in code but one named by the environment, the API is asked (here: a no-op)."""
    from opentelemetry import metrics

    from resilience.telemetry import _otel

    asked: list[bool] = []
    proxy = metrics.get_meter_provider()

    def get_meter_provider() -> Any:
        asked.append(True)
        return proxy

    monkeypatch.setattr("opentelemetry.metrics._internal._METER_PROVIDER", None)  # none set in code
    monkeypatch.setattr(_otel, "_env_names_provider", True)
    monkeypatch.setattr(metrics, "get_meter_provider", get_meter_provider)
    assert _otel._meter_provider(TelemetryOptions()) is None
    assert asked == [True]
    monkeypatch.setattr(_otel, "_env_names_provider", False)
    assert _otel._meter_provider(TelemetryOptions()) is None
    assert asked == [True]


def test_an_event_no_metric_records_is_built_only_for_a_span(reader: InMemoryMetricReader) -> None:
    """With only a meter provider, `PipelineExecuting` (never recorded) is not built; a recording span gets it."""
    from resilience.telemetry._source import TelemetrySource

    provider = MeterProvider(metric_readers=[reader])
    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    source = TelemetrySource(TelemetryOptions(meter_provider=provider, tracer_provider=tracer_provider))
    assert source.emit("PipelineExecuting", Severity.DEBUG) is Severity.NONE
    assert source.emit("PipelineExecuted", Severity.DEBUG) is Severity.DEBUG
    with tracer_provider.get_tracer("test").start_as_current_span("request"):
        assert source.emit("PipelineExecuting", Severity.DEBUG) is Severity.DEBUG
    (span,) = exporter.get_finished_spans()
    assert [event.name for event in span.events] == ["PipelineExecuting"]
