"""`TelemetrySource`: the one place strategies send their events through.

The fast path matters: an event nobody listens to (no listener, no severity provider, logger
disabled for its level) costs a few attribute reads and builds nothing.
"""

from __future__ import annotations

import copy
import dataclasses
import logging
import threading
from typing import TYPE_CHECKING, Any, TypeVar

from resilience.telemetry import _otel
from resilience.telemetry._event import Severity, TelemetryEvent
from resilience.telemetry._options import TelemetryOptions

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from resilience._outcome import Outcome
    from resilience.telemetry._options import Listener, SeverityProvider

__all__ = ["CAPTURES", "LOGGER", "Tally", "TelemetrySource", "otel_active"]

LOGGER = logging.getLogger("resilience")
LOGGER.addHandler(logging.NullHandler())

_DEFAULT_OPTIONS = TelemetryOptions()

otel_active = _otel.is_active
"""`otel_active(options)`: whether an OpenTelemetry provider records anything for `options` (one frame)."""

T = TypeVar("T")


class _Captures:
    """Process-wide listeners installed by `resilience.testing.capture_events()`."""

    def __init__(self) -> None:
        self.listeners: tuple[Listener, ...] = ()  # replaced whole, so readers need no lock


CAPTURES = _Captures()


class Tally:
    """How many callers are inside its `with` blocks now, from any thread (a state metric's value)."""

    __slots__ = ("_lock", "value")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.value = 0

    def __enter__(self) -> None:
        with self._lock:
            self.value += 1

    def __exit__(self, *_: object) -> None:
        with self._lock:
            self.value -= 1


class TelemetrySource:
    """Emits the events of one strategy (or of the pipeline itself, with `strategy_name=None`)."""

    __slots__ = ("_listeners", "_severity_provider", "options", "pipeline_instance", "pipeline_name", "strategy_name")

    def __init__(
        self,
        options: TelemetryOptions | None = None,
        *,
        pipeline_name: str | None = None,
        pipeline_instance: str | None = None,
        strategy_name: str | None = None,
    ) -> None:
        self.options = options or _DEFAULT_OPTIONS
        self.pipeline_name = pipeline_name
        self.pipeline_instance = pipeline_instance
        self.strategy_name = strategy_name
        self._listeners = tuple(self.options.listeners)
        self._severity_provider = self.options.severity_provider

    def for_strategy(self, strategy_name: str | None) -> TelemetrySource:
        """The same pipeline's source for another strategy."""
        source = copy.copy(self)
        source.strategy_name = strategy_name
        return source

    def observe(self, metric: str, owner: T, read: Callable[[T], float], tags: Mapping[str, str] | None = None) -> None:
        """Report `read(owner)` as the state metric `metric` at each collection, while `owner` lives.

        Tagged with this source's `pipeline.name` and `strategy.name`, and `tags`. The owner
        keeps its state as it would anyway; nothing runs for the metric until a provider
        collects (docs/telemetry.md, "State metrics").
        """
        found = {"pipeline.name": self.pipeline_name, "strategy.name": self.strategy_name, **(tags or {})}
        _otel.observe(metric, owner, read, self.options, {k: v for k, v in found.items() if v is not None})

    def execution_span(self, attributes: Mapping[str, str]) -> Any:
        """The execution span's context manager, or None when no tracer records (`trace_executions` is asked first)."""
        return self._span("resilience.pipeline.execute", attributes)

    def span(self, name: str, attempt: int) -> Any:
        """A child span for one attempt (`trace_executions`), or None when no tracer records."""
        facts = {"attempt.number": attempt, "pipeline.name": self.pipeline_name, "strategy.name": self.strategy_name}
        return self._span(name, {k: v for k, v in facts.items() if v is not None})

    def _span(self, name: str, attributes: Mapping[str, Any]) -> Any:
        tracer = _otel.tracer(self.options)
        if tracer is None:
            return None
        return tracer.start_as_current_span(name, attributes=attributes)

    def enabled(self, severity: Severity) -> bool:
        """Whether an event of this default severity would reach anything at all."""
        # Called once or twice per execution by the strategies: severity._level is what the
        # log_level property returns, read without the property call.
        return bool(
            self._listeners
            or self._severity_provider is not None
            or CAPTURES.listeners
            or LOGGER.isEnabledFor(severity._level)
            or _otel.is_active(self.options)
        )

    def emit(
        self,
        name: str,
        severity: Severity,
        *,
        operation_key: str | None = None,
        outcome: Outcome[Any] | None = None,
        arguments: object | None = None,
    ) -> Severity:
        """Report an event; returns the severity it went out with (`NONE` if suppressed or unheard)."""
        provider = self._severity_provider
        if (
            provider is None
            and not self._listeners
            and not CAPTURES.listeners
            and not LOGGER.isEnabledFor(severity._level)
        ):
            # Only OpenTelemetry can hear it. The common production case, a meter provider and no
            # recording span, buffers the measurements without building the event. Otherwise only a
            # recording span can take it (no metric records a span-only event), and the event is
            # built only for one (building it costs a fifth of an execution).
            options = self.options
            instruments = None if name in _otel.SPAN_ONLY else _otel.metrics_only(options)
            if instruments is not None:
                fields = _Fields(self, name, severity)
                fields.operation_key = operation_key
                fields.outcome = outcome
                fields.arguments = arguments
                _otel.record(instruments, fields, options)
                return severity
            if _otel.recording_span(options) is None:
                return Severity.NONE
        event = TelemetryEvent(
            name=name,
            severity=severity,
            pipeline_name=self.pipeline_name,
            pipeline_instance=self.pipeline_instance,
            strategy_name=self.strategy_name,
            operation_key=operation_key,
            outcome=outcome,
            arguments=arguments,
        )
        if provider is not None:
            chosen = _ask(provider, event)
            if chosen is Severity.NONE:
                return Severity.NONE
            if chosen is not severity:
                event = dataclasses.replace(event, severity=chosen)
        for listener in (*self._listeners, *CAPTURES.listeners):
            try:
                listener(event)
            except Exception:
                LOGGER.exception("a telemetry listener raised on %s", name)
        _log(event, self.options)
        try:
            _otel.export(event, self.options)
        except Exception:
            LOGGER.exception("exporting %s to OpenTelemetry failed", name)
        return event.severity


class _Fields:
    """An event's fields for the metrics-only path: plain attributes, no frozen dataclass to build."""

    __slots__ = TelemetryEvent.__slots__  # the event's fields, writable

    # Set by `emit` right after the fields of the source.
    operation_key: str | None
    outcome: Outcome[Any] | None
    arguments: object | None

    def __init__(self, source: TelemetrySource, name: str, severity: Severity) -> None:
        self.name = name
        self.severity = severity
        self.pipeline_name = source.pipeline_name
        self.pipeline_instance = source.pipeline_instance
        self.strategy_name = source.strategy_name


def _ask(provider: SeverityProvider, event: TelemetryEvent) -> Severity:
    """The provider's severity for `event`; its default when the provider fails or answers nonsense."""
    try:
        chosen: object = provider(event)
    except Exception:
        LOGGER.exception("the severity provider raised; keeping the default severity of %s", event.name)
        return event.severity
    if isinstance(chosen, Severity):
        return chosen
    LOGGER.error("the severity provider returned %r, not a Severity, for %s", chosen, event.name)
    return event.severity


def _log(event: TelemetryEvent, options: TelemetryOptions) -> None:
    level = event.severity.log_level
    if not LOGGER.isEnabledFor(level):
        return
    outcome = event.outcome
    if outcome is None:
        result = ""
    elif outcome.error is None:
        result = ", result: ok"
    else:
        result = f", result: {_otel.exception_type(outcome.error)}: {outcome.error}"
    if event.name == "ExecutionAttempt":
        # Polly's attempt log: a failed attempt at Information is one the strategy did not handle.
        arguments = event.arguments
        result += f", attempt: {getattr(arguments, 'attempt', '?')}, handled: {getattr(arguments, 'handled', '?')}"
    # Only the parts that are set: 'nightly/Lock', 'nightly/eu-1/Lock', never 'nightly//Lock'.
    source = "/".join(part for part in (event.pipeline_name, event.pipeline_instance, event.strategy_name) if part)
    LOGGER.log(
        level,
        "Resilience event occurred. EventName: '%s', Source: '%s', Operation Key: '%s'%s",
        event.name,
        source,
        event.operation_key or "",
        result,
        # The span event's attributes: plain values under their OpenTelemetry names, so that a
        # logging bridge exports them as they are (no None, no objects).
        extra=_otel.attributes(event, options),
    )
