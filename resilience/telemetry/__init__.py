"""Telemetry: every event of every strategy, to listeners and the `resilience` logger.

`TelemetryOptions` goes on the builder (`PipelineBuilder(telemetry=...)`); listeners receive
frozen `TelemetryEvent`s; `Severity.NONE` from a `severity_provider` suppresses an event.
"""

from resilience.telemetry._event import Severity, TelemetryEvent
from resilience.telemetry._options import Listener, SeverityProvider, TelemetryOptions

__all__ = ["Listener", "Severity", "SeverityProvider", "TelemetryEvent", "TelemetryOptions"]
