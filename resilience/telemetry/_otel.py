"""The OpenTelemetry side of telemetry: metrics, span events and execution spans.

Only the OpenTelemetry **API** is used, imported lazily. Whether anything would record is
decided without importing it: if no code has imported `opentelemetry.metrics` (or
`opentelemetry.trace`), no SDK can have been installed, and the export costs one dictionary
lookup. Instruments are created once per meter provider.
"""

from __future__ import annotations

import os
import sys
import threading
import weakref
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from opentelemetry.metrics import Counter, Histogram, MeterProvider
    from opentelemetry.trace import Tracer, TracerProvider

    from resilience.telemetry._event import TelemetryEvent
    from resilience.telemetry._options import TelemetryOptions

__all__ = ["CONTEXT_TAGS", "INSTRUMENTS", "export", "exports", "is_active", "tracer"]

CONTEXT_TAGS: Final[ContextVar[Callable[[TelemetryEvent], Mapping[str, Any]] | None]] = ContextVar(
    "resilience_context_tags", default=None
)
"""Extra metric and span tags for the events emitted while it is set (a callable per event).

An integration (the HTTP transport) sets it around the executions it starts, so that every
event of them carries its tags (`http.request.method`, `server.address`, ...) without the
strategies knowing about HTTP. It runs only when an event is exported, and must return tags
of bounded cardinality.
"""

METER_NAME = "resilience"
_NOOP_PROVIDERS = frozenset({"_ProxyMeterProvider", "NoOpMeterProvider"})
_NOOP_TRACER_PROVIDERS = frozenset({"ProxyTracerProvider", "NoOpTracerProvider"})

# event name -> the histogram its duration goes to, and the arguments attribute holding it.
_NOT_COUNTED = frozenset({"ExecutionAttempt", "PipelineExecuting", "PipelineExecuted"})
# Events that no metric records (not counted, no duration histogram): only a span sees them.
_SPAN_ONLY = frozenset({"PipelineExecuting"})
_LOCK_WAIT = frozenset({"OnLockAcquired", "OnLockRejected"})
_LOCK_HOLD = frozenset({"OnLockReleased", "OnLockLost"})

# Bucket boundaries (seconds) suited to resilience timings: sub-millisecond to minutes.
_DURATION_BUCKETS = (
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300,
)  # fmt: skip


class Instruments:
    """The five instruments of DESIGN §2.11 on one meter provider."""

    __slots__ = ("attempt_duration", "events", "lock_hold", "lock_wait", "pipeline_duration")

    def __init__(self, provider: MeterProvider) -> None:
        meter = provider.get_meter(METER_NAME)
        self.events: Counter = meter.create_counter(
            "resilience.strategy.events", unit="{event}", description="Resilience events, by event and source."
        )
        self.attempt_duration: Histogram = meter.create_histogram(
            "resilience.strategy.attempt.duration",
            unit="s",
            description="Duration of each execution attempt.",
            explicit_bucket_boundaries_advisory=_DURATION_BUCKETS,
        )
        self.pipeline_duration: Histogram = meter.create_histogram(
            "resilience.pipeline.duration",
            unit="s",
            description="Duration of each pipeline execution.",
            explicit_bucket_boundaries_advisory=_DURATION_BUCKETS,
        )
        self.lock_wait: Histogram = meter.create_histogram(
            "resilience.lock.wait.duration",
            unit="s",
            description="Time spent acquiring a lock, whether it was acquired or rejected.",
            explicit_bucket_boundaries_advisory=_DURATION_BUCKETS,
        )
        self.lock_hold: Histogram = meter.create_histogram(
            "resilience.lock.hold.duration",
            unit="s",
            description="Time a lock was held, until released or lost.",
            explicit_bucket_boundaries_advisory=_DURATION_BUCKETS,
        )


class _InstrumentCache:
    """Instruments per meter provider, created once (weakly keyed when the provider allows)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._weak: weakref.WeakKeyDictionary[Any, Instruments] = weakref.WeakKeyDictionary()
        self._strong: dict[int, tuple[Any, Instruments]] = {}
        self._last: tuple[Any, Instruments] | None = None

    def get(self, provider: MeterProvider) -> Instruments:
        last = self._last
        if last is not None and last[0] is provider:
            return last[1]
        with self._lock:
            try:
                found = self._weak.get(provider)
            except TypeError:  # not weak-referenceable
                entry = self._strong.get(id(provider))
                found = entry[1] if entry is not None and entry[0] is provider else None
            if found is None:
                found = Instruments(provider)
                try:
                    self._weak[provider] = found
                except TypeError:
                    self._strong[id(provider)] = (provider, found)
            self._last = (provider, found)
            return found


INSTRUMENTS = _InstrumentCache()


_UNKNOWN: Any = object()
_ENV_METER_PROVIDER = "OTEL_PYTHON_METER_PROVIDER"
_env_names_provider: bool | None = None


def _environment_names_meter_provider() -> bool:
    """Whether `OTEL_PYTHON_METER_PROVIDER` is set; read once, at the first check that needs it.

    `name in os.environ` raises and catches a `KeyError` inside when the name is absent
    (1.7 us on the CI machine), which was the biggest single cost of an execution's success
    path once anything had imported the OpenTelemetry API. The API itself only reads the
    variable to load a provider when none was set in code; like its auto-configuration, we
    take it as fixed for the process.
    """
    global _env_names_provider  # noqa: PLW0603 - a process-wide, write-once cache
    names = _env_names_provider
    if names is None:
        names = _env_names_provider = _ENV_METER_PROVIDER in os.environ
    return names


def _meter_provider(options: TelemetryOptions) -> MeterProvider | None:
    if options.meter_provider is not None:
        return options.meter_provider
    metrics = sys.modules.get("opentelemetry.metrics")
    if metrics is None:
        return None  # nobody imported the metrics API, so no SDK is installed
    # `get_meter_provider()` returns the no-op proxy while no provider was set in code and
    # the environment names none; read the API's global directly to skip its environment
    # lookup on that (hot) path. Any other case, or an API without that global, asks the API.
    global_provider = getattr(sys.modules.get("opentelemetry.metrics._internal"), "_METER_PROVIDER", _UNKNOWN)
    if global_provider is None and not _environment_names_meter_provider():
        return None
    provider: MeterProvider = metrics.get_meter_provider()
    return None if type(provider).__name__ in _NOOP_PROVIDERS else provider


def _recording_span(options: TelemetryOptions) -> Any:
    trace = sys.modules.get("opentelemetry.trace")
    if trace is None:
        return None
    if options.tracer_provider is None and getattr(trace, "_TRACER_PROVIDER", True) is None:
        return None  # no global tracer provider installed and none given: no recording span
    span = trace.get_current_span()
    return span if span.is_recording() else None


def is_active(options: TelemetryOptions) -> bool:
    """Whether an event could reach a meter or a span right now."""
    return _meter_provider(options) is not None or _recording_span(options) is not None


def exports(name: str, options: TelemetryOptions) -> bool:
    """Whether `export` would do anything with an event called `name` right now."""
    if name in _SPAN_ONLY:
        return _recording_span(options) is not None  # a meter would record nothing for it
    return is_active(options)


def tracer(options: TelemetryOptions) -> Tracer | None:
    """The tracer for execution spans, or None when no tracer provider records."""
    provider: TracerProvider | None = options.tracer_provider
    if provider is None:
        trace = sys.modules.get("opentelemetry.trace")
        if trace is None:
            return None
        provider = trace.get_tracer_provider()
        if type(provider).__name__ in _NOOP_TRACER_PROVIDERS:
            return None
    return provider.get_tracer(METER_NAME)


def exception_type(error: BaseException) -> str:
    """The fully qualified name of an exception's type (builtins without a module)."""
    kind = type(error)
    module = kind.__module__
    return kind.__qualname__ if module == "builtins" else f"{module}.{kind.__qualname__}"


def tags(event: TelemetryEvent, options: TelemetryOptions) -> dict[str, Any]:
    """The metric tags of an event (each only when not None)."""
    attributes: dict[str, Any] = {"event.name": event.name, "event.severity": event.severity.value}
    if event.pipeline_name is not None:
        attributes["pipeline.name"] = event.pipeline_name
    if event.pipeline_instance is not None:
        attributes["pipeline.instance"] = event.pipeline_instance
    if event.strategy_name is not None:
        attributes["strategy.name"] = event.strategy_name
    outcome = event.outcome
    if outcome is not None and outcome.error is not None:
        attributes["exception.type"] = exception_type(outcome.error)
    if options.tag_operation_key and event.operation_key is not None:
        attributes["operation.key"] = event.operation_key
    extra = CONTEXT_TAGS.get()
    if extra is not None:
        attributes.update(extra(event))
    return attributes


def export(event: TelemetryEvent, options: TelemetryOptions) -> None:
    """Record the event's metrics and add it to the current span, where either is active."""
    provider = _meter_provider(options)
    span = _recording_span(options)
    if provider is None and span is None:
        return
    attributes = tags(event, options)
    if provider is not None:
        _record(INSTRUMENTS.get(provider), event, attributes)
    if span is not None:
        span_attributes = dict(attributes)
        if event.operation_key is not None:
            span_attributes["operation.key"] = event.operation_key
        key = getattr(event.arguments, "key", None)
        if isinstance(key, str) and event.name.startswith("OnLock"):
            span_attributes["lock.key"] = key
        span.add_event(event.name, span_attributes)


def _record(instruments: Instruments, event: TelemetryEvent, attributes: dict[str, Any]) -> None:
    name = event.name
    arguments = event.arguments
    if name not in _NOT_COUNTED:
        instruments.events.add(1, attributes)
    if name == "ExecutionAttempt":
        attempt_tags = dict(attributes)
        attempt_tags["attempt.number"] = getattr(arguments, "attempt", 0)
        attempt_tags["attempt.handled"] = bool(getattr(arguments, "handled", False))
        instruments.attempt_duration.record(float(getattr(arguments, "duration", 0.0)), attempt_tags)
    elif name == "PipelineExecuted":
        instruments.pipeline_duration.record(float(getattr(arguments, "duration", 0.0)), attributes)
    elif name in _LOCK_WAIT:
        wait = getattr(arguments, "wait_duration", None)
        if wait is not None:
            instruments.lock_wait.record(float(wait), attributes)
    elif name in _LOCK_HOLD:
        hold = getattr(arguments, "hold_duration", None)
        if hold is not None:
            instruments.lock_hold.record(float(hold), attributes)
