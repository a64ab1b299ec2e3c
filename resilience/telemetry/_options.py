"""`TelemetryOptions`: where a pipeline's events go, and how severe they are."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from resilience.telemetry._event import Severity, TelemetryEvent

__all__ = ["Listener", "SeverityProvider", "TelemetryOptions"]

Listener = Callable[[TelemetryEvent], object]
SeverityProvider = Callable[[TelemetryEvent], Severity]


@dataclass(frozen=True, slots=True)
class TelemetryOptions:
    """Telemetry settings of a pipeline (`PipelineBuilder(telemetry=...)`).

    - `listeners`: callables receiving every event, synchronously on the emitting thread
      (their exceptions are logged, never raised).
    - `severity_provider(event) -> Severity`: runs before anything is produced; return
      `Severity.NONE` to suppress the event everywhere (listeners, logs, metrics, spans).
    - `tag_operation_key`: add `operation.key` to metric tags (mind the cardinality).
    - `trace_executions`: wrap each execution (and each retry attempt) in a span.
    """

    listeners: Sequence[Listener] = ()
    severity_provider: SeverityProvider | None = None
    tag_operation_key: bool = False
    trace_executions: bool = False
