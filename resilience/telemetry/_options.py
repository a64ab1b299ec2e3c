"""`TelemetryOptions`: where a pipeline's events go, and how severe they are."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from resilience.telemetry._event import Severity, TelemetryEvent

if TYPE_CHECKING:
    from opentelemetry.metrics import MeterProvider
    from opentelemetry.trace import TracerProvider

__all__ = ["Listener", "SeverityProvider", "TelemetryOptions"]

Listener = Callable[[TelemetryEvent], object]
"""A telemetry listener: called with every event, on the emitting thread; its result is ignored."""
SeverityProvider = Callable[[TelemetryEvent], Severity]
"""Chooses an event's severity before anything is produced; `Severity.NONE` suppresses it."""


@dataclass(frozen=True, slots=True)
class TelemetryOptions:
    """Telemetry settings of a pipeline (`PipelineBuilder(telemetry=...)`).

    - `listeners`: callables receiving every event, synchronously on the emitting thread
      (their exceptions are logged, never raised).
    - `severity_provider(event) -> Severity`: runs before anything is produced; return
      `Severity.NONE` to suppress the event everywhere (listeners, logs, metrics, spans).
    - `tag_operation_key`: add `operation.key` to metric tags (mind the cardinality).
    - `trace_executions`: wrap each execution (and each retry attempt) in a span.
    - `meter_provider` / `tracer_provider`: OpenTelemetry providers to use instead of the
      global ones (handy in tests, or to keep a library's metrics apart).
    """

    listeners: Sequence[Listener] = ()
    severity_provider: SeverityProvider | None = None
    tag_operation_key: bool = False
    trace_executions: bool = False
    meter_provider: MeterProvider | None = None
    tracer_provider: TracerProvider | None = None

    def __post_init__(self) -> None:
        # A frozen options object must not share a list the caller may still change.
        object.__setattr__(self, "listeners", tuple(self.listeners))
