"""The OpenTelemetry side of telemetry: metrics, span events and execution spans.

Only the OpenTelemetry **API** is used, imported lazily. Whether anything would record is
decided without importing it: if no code has imported `opentelemetry.metrics` (or
`opentelemetry.trace`), no SDK can have been installed, and the export costs one dictionary
lookup. Instruments are created once per meter provider, on a meter (and a tracer) named
`resilience` with the library's version.

Measurements are **batched**: an execution adds its counts and durations to a small per-provider
buffer (one dictionary lookup under an uncontended lock), and the buffer is handed to the real
instruments when the provider collects (an observable callback that runs at the start of every
collection) or when it grows past `_FLUSH_AT` measurements. The instruments, units, tags and
recorded values are exactly those of an unbatched export; what moves is the CPU: the SDK's
per-measurement work (attribute cleaning, hashing, bucket search) runs once per collection for
counters and off the calling thread for histograms, instead of inside every call. Inside a
recording span the histograms are recorded at once instead, in the caller's context, so that an
SDK whose exemplar filter samples traced measurements (its default) attaches the trace.

The **state metrics** (leases held, circuit states, limiter permits) are observed: an owner (a
lock's events, a circuit, a limiter) registers once with `observe`, and its value is read only
when a provider collects. Nothing is counted for them while nobody reads.
"""

from __future__ import annotations

import functools
import itertools
import logging
import os
import sys
import threading
import weakref
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, Final, TypeAlias

from resilience._outcome import Err
from resilience._runtime._threads import start_thread
from resilience._version import __version__
from resilience.exceptions import (
    LockLostError,
    LockNotAcquiredError,
    RateLimiterRejectedError,
    SemaphoreLeaseLostError,
    TimeoutRejectedError,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from opentelemetry.metrics import Counter, Histogram, MeterProvider
    from opentelemetry.trace import Tracer, TracerProvider

    from resilience.telemetry._event import TelemetryEvent
    from resilience.telemetry._options import TelemetryOptions
    from resilience.telemetry._source import _Fields

__all__ = [
    "CONTEXT_TAGS",
    "INSTRUMENTS",
    "SPAN_ONLY",
    "EventFields",
    "attributes",
    "export",
    "is_active",
    "metrics_only",
    "observe",
    "record",
    "recording_span",
    "tracer",
]

EventFields: TypeAlias = "TelemetryEvent | _Fields"
"""What `record`, `tags` and `attributes` read: a `TelemetryEvent`, or the metrics-only path's cheaper stand-in."""

CONTEXT_TAGS: Final[ContextVar[Callable[[EventFields], Mapping[str, Any]] | None]] = ContextVar(
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

# Events the counter `resilience.strategy.events` leaves out (docs/telemetry.md, "Metrics").
_NOT_COUNTED = frozenset({"ExecutionAttempt", "PipelineExecuting", "PipelineExecuted"})
# Events that no metric records (not counted, no duration histogram): only a span sees them.
SPAN_ONLY = frozenset({"PipelineExecuting"})
_LOCK_WAIT = frozenset({"OnLockAcquired", "OnLockRejected"})
_LOCK_EVENTS = _LOCK_WAIT | {"OnLockReleased", "OnLockLost", "OnLockRenewalFailed"}

# Events whose outcome is a failure the strategy handled, even when it is a result (an HTTP 503).
_HANDLED = frozenset({"OnRetry", "OnCircuitOpened", "OnFallback"})
# Events that mean the execution fails with the library's own error, which is not their outcome.
_RAISES = {
    "OnTimeout": TimeoutRejectedError,
    "OnRateLimiterRejected": RateLimiterRejectedError,
    "OnLockRejected": LockNotAcquiredError,
    "OnLockLost": LockLostError,
}

# The facts span events and log records carry: attribute name -> the arguments' field.
_ATTEMPT_FACTS = (("attempt.number", "attempt"), ("attempt.handled", "handled"), ("attempt.duration", "duration"))
_FACTS: dict[str, tuple[tuple[str, str], ...]] = {
    "ExecutionAttempt": _ATTEMPT_FACTS,
    "OnRetry": (("attempt.number", "attempt"), ("retry.delay", "delay")),
    "OnHedging": (("attempt.number", "attempt"),),
    "OnCircuitOpened": (("circuit.break_duration", "break_duration"),),
    **dict.fromkeys(_LOCK_EVENTS, (("lock.key", "key"), ("lock.token", "token"), ("lock.mode", "mode"))),
}

# The state metrics (`observe`): name, unit, description, and how two owners with the same tags add up.
_STATE_METRICS: tuple[tuple[str, str, str, Callable[[list[float]], float]], ...] = (
    ("resilience.lock.held", "{lease}", "Leases this process holds now (locks and semaphore permits).", sum),
    ("resilience.circuit.state", "{state}", "Circuit state now: 0 closed, 1 half-open, 2 open, 3 isolated.", max),
    ("resilience.limiter.in_use", "{permit}", "Permits of a concurrency limiter held now.", sum),
    ("resilience.limiter.queued", "{caller}", "Callers waiting for a concurrency limiter's permit now.", sum),
)

# Bucket boundaries (seconds) suited to resilience timings, sub-millisecond to minutes: about two
# per doubling from 10 ms to 30 s, so a quantile read between two boundaries stays close to the truth.
_DURATION_BUCKETS = (
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.25, 0.35, 0.5, 0.75, 1, 1.5, 2,
    3, 5, 7.5, 10, 15, 30, 60, 120, 300,
)  # fmt: skip


class Instruments:
    """The instruments of docs/telemetry.md on one meter provider."""

    __slots__ = ("attempt_duration", "batch", "events", "lock_hold", "lock_wait", "pipeline_duration")

    def __init__(self, provider: MeterProvider) -> None:
        meter = provider.get_meter(METER_NAME, __version__)
        self.events: Counter = meter.create_counter(
            "resilience.strategy.events", unit="{event}", description="Resilience events, by event and source."
        )

        def histogram(name: str, description: str) -> Histogram:
            return meter.create_histogram(
                name, unit="s", description=description, explicit_bucket_boundaries_advisory=_DURATION_BUCKETS
            )

        self.attempt_duration = histogram("resilience.strategy.attempt.duration", "Duration of each execution attempt.")
        self.pipeline_duration = histogram("resilience.pipeline.duration", "Duration of each pipeline execution.")
        self.lock_wait = histogram(
            "resilience.lock.wait.duration", "Time spent acquiring a lock, whether it was acquired or rejected."
        )
        self.lock_hold = histogram("resilience.lock.hold.duration", "Time a lock was held, until released or lost.")
        self.batch = Batch()
        # Collections call observable callbacks before they read the synchronous instruments,
        # so measurements flushed here are part of that same collection. The callback observes
        # nothing, so the gauge itself never appears in any export. (A provider that never
        # calls callbacks still gets everything: the buffer flushes itself when full.)
        meter.create_observable_gauge("resilience.internal.flush", callbacks=[self._flush_on_collect])
        # The state metrics: read from their owners at each collection (see `observe`).
        for name, unit, description, combine in _STATE_METRICS:
            create = meter.create_observable_gauge if combine is max else meter.create_observable_up_down_counter
            create(name, [functools.partial(self._observed, combine, name)], unit=unit, description=description)

    def _observed(self, combine: Callable[[list[float]], float], metric: str, _options: object) -> list[Any]:
        """The observations of `metric` for this provider: one per tag set (`combine`d when shared)."""
        from opentelemetry.metrics import Observation

        values: dict[tuple[tuple[str, Any], ...], list[float]] = {}
        for name, owner, read, options, tags in list(_OBSERVED.values()):
            provider = _meter_provider(options) if name == metric else None
            alive = owner()
            if alive is not None and provider is not None and INSTRUMENTS.get(provider) is self:
                values.setdefault(tags, []).append(read(alive))
        return [Observation(combine(found), dict(tags)) for tags, found in values.items()]

    def _flush_on_collect(self, _options: object) -> list[Any]:
        # Wait (briefly) for a flush another thread is in the middle of, so that this
        # collection holds everything recorded before it started.
        self.batch.flush(wait=_COLLECT_WAIT)
        return []


# Measurements held between collections before the recording thread flushes them itself:
# bounds the buffer's memory when a provider collects rarely (or never).
_FLUSH_AT = 4096
# How long a collection waits for another thread's flush to finish before it goes on without
# the values that flush holds (they are then part of the next collection).
_COLLECT_WAIT = 1.0

# A measurement's identity in the buffer: the instrument and everything its tags are made of.
_Key = tuple[Any, ...]


class Batch:
    """Counts and durations waiting for the next collection, grouped by instrument and tags."""

    __slots__ = ("_counts", "_durations", "_flush_lock", "_flushing", "_lock", "_pending", "limit")

    def __init__(self) -> None:
        self._lock = threading.Lock()  # guards the buffer; held for a few operations only
        self._flush_lock = threading.Lock()  # held by a flush from its swap to its last record
        # key -> (instrument, tags, values): a counter's values are ones, added up when flushed
        self._counts: dict[_Key, tuple[Counter, dict[str, Any], list[float]]] = {}
        self._durations: dict[_Key, tuple[Histogram, dict[str, Any], list[float]]] = {}
        self._pending = 0
        self._flushing = False
        self.limit = _FLUSH_AT

    def record(
        self, key: _Key, instrument: Any, tags: Callable[[], dict[str, Any]], value: float, *, counted: bool = False
    ) -> None:
        """Record `value` in the histogram `instrument` (a counter's one: `counted`) under the tags `key` stands for.

        `tags()` is called once per key, when the key is first seen.
        """
        with self._lock:  # the buffer is read under it: a flush swaps it for an empty one
            entries: dict[_Key, Any] = self._counts if counted else self._durations
            entry = entries.get(key)
            if entry is None:
                entries[key] = (instrument, tags(), [value])
            else:
                entry[2].append(value)
            self._pending += 1
            full = self._pending >= self.limit
        if full:
            self._overflow()

    def _overflow(self) -> None:
        """The buffer is full: a short-lived thread flushes it, so no call pays for the whole batch.

        If measurements keep arriving faster than that thread hands them on, the recording
        thread flushes too (at four times the limit), which bounds the buffer's memory.
        """
        with self._lock:
            if self._flushing and self._pending < 4 * self.limit:
                return
            first = not self._flushing
            self._flushing = True
        if not first:
            self.flush()
            return
        start_thread(self._flush_in_background, name="resilience-telemetry-flush")

    def _flush_in_background(self) -> None:
        try:
            self.flush()
        finally:
            with self._lock:
                self._flushing = False

    def flush(self, wait: float = -1) -> None:
        """Hand everything buffered to the instruments (safe from any thread, at any time).

        Flushes run one at a time, so a flush that returns has seen every earlier flush
        finish; `wait` bounds how long to wait for one in progress (-1: as long as it takes).
        """
        if not self._flush_lock.acquire(timeout=wait):
            return
        try:
            with self._lock:
                if not self._pending:
                    return
                counts, self._counts = self._counts, {}
                durations, self._durations = self._durations, {}
                self._pending = 0
            for counter, attributes, ones in counts.values():
                counter.add(len(ones), attributes)
            for histogram, attributes, values in durations.values():
                record = histogram.record
                for value in values:
                    record(value, attributes)
        except Exception:  # a broken provider must not break the thread that flushes
            logging.getLogger("resilience").exception("recording metrics in OpenTelemetry failed")
        finally:
            self._flush_lock.release()


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
            except TypeError:  # not weak-referenceable: its entry holds it, so its id is not reused
                found = self._strong.get(id(provider), (None, None))[1]
            if found is None:
                found = Instruments(provider)
                try:
                    self._weak[provider] = found
                except TypeError:
                    self._strong[id(provider)] = (provider, found)
            self._last = (provider, found)
            return found


INSTRUMENTS = _InstrumentCache()


# Every live owner's state metrics: (metric, weak reference to the owner, read, options, tags),
# under a key of their own; an entry leaves when its owner is collected.
_OBSERVED: dict[int, tuple[str, weakref.ref[Any], Callable[[Any], float], TelemetryOptions, tuple[Any, ...]]] = {}
_OBSERVED_KEYS = itertools.count()


def observe(
    metric: str, owner: object, read: Callable[[Any], float], options: TelemetryOptions, tags: Mapping[str, Any]
) -> None:
    """Report `read(owner)` as the state metric `metric` with `tags` at every collection, while `owner` lives."""
    key = next(_OBSERVED_KEYS)
    owner_ref = weakref.ref(owner, lambda _ref: _OBSERVED.pop(key, None))
    _OBSERVED[key] = (metric, owner_ref, read, options, tuple(tags.items()))
    provider = _meter_provider(options)
    if provider is not None:
        INSTRUMENTS.get(provider)  # the state shows from the next collection, before any event


_UNKNOWN: Any = object()
_env_names_provider: bool | None = None
# The global meter provider last seen, and what `_meter_provider` made of it.
_last_global: tuple[Any, Any] = (_UNKNOWN, None)


def _meter_provider(options: TelemetryOptions) -> MeterProvider | None:
    global _last_global, _env_names_provider  # noqa: PLW0603 - process-wide caches (replaced whole; write-once)
    if options.meter_provider is not None:
        return options.meter_provider
    metrics = _metrics_api or _api_modules()[0]
    if metrics is None:
        return None  # nobody imported the metrics API, so no SDK is installed
    # `get_meter_provider()` returns the no-op proxy while no provider was set in code and
    # the environment names none; read the API's global directly to skip its environment
    # lookup on that (hot) path. Any other case, or an API without that global, asks the API.
    try:
        global_provider = metrics._METER_PROVIDER
    except AttributeError:
        global_provider = _UNKNOWN
    if global_provider is None:
        # Whether `OTEL_PYTHON_METER_PROVIDER` is set; read once, at the first check that needs it.
        # `name in os.environ` raises and catches a `KeyError` inside when the name is absent
        # (1.7 us on the CI machine), which was the biggest single cost of an execution's success
        # path once anything had imported the OpenTelemetry API. The API itself only reads the
        # variable to load a provider when none was set in code; like its auto-configuration, we
        # take it as fixed for the process.
        names = _env_names_provider
        if names is None:
            names = _env_names_provider = "OTEL_PYTHON_METER_PROVIDER" in os.environ
        if not names:
            return None
    elif global_provider is not _UNKNOWN:
        # What `get_meter_provider()` returns once a provider is set, remembered by identity
        # (one tuple, replaced whole, so a reader never pairs one provider with another's answer).
        last = _last_global
        if global_provider is last[0]:
            return last[1]  # type: ignore[no-any-return]
        found = None if type(global_provider).__name__ in _NOOP_PROVIDERS else global_provider
        _last_global = (global_provider, found)
        return found
    provider: MeterProvider = sys.modules["opentelemetry.metrics"].get_meter_provider()
    return None if type(provider).__name__ in _NOOP_PROVIDERS else provider


def recording_span(options: TelemetryOptions) -> Any:
    """The current span when it records (a tracer provider is set in code or in `options`), else None."""
    trace = _trace_api or _api_modules()[1]
    if trace is None:
        return None
    if options.tracer_provider is None:
        try:
            if trace._TRACER_PROVIDER is None:
                return None  # no global tracer provider installed and none given: no recording span
        except AttributeError:  # an API without that global: the current span decides
            pass
    span = trace.get_current_span()
    return span if span.is_recording() else None


# The API modules whose globals say whether a provider was set in code
# (`opentelemetry.metrics._internal`, `opentelemetry.trace`), kept once imported (a module
# stays imported): the checks then read module attributes, no lookup, no call.
_metrics_api: Any = None
_trace_api: Any = None


def _api_modules() -> tuple[Any, Any]:
    global _metrics_api, _trace_api  # noqa: PLW0603 - a process-wide cache, filled once each
    _metrics_api = _metrics_api or sys.modules.get("opentelemetry.metrics._internal")
    _trace_api = _trace_api or sys.modules.get("opentelemetry.trace")
    return _metrics_api, _trace_api


def is_active(options: TelemetryOptions) -> bool:
    """Whether an event could reach a meter or a span right now."""
    if options.meter_provider is None and options.tracer_provider is None:
        # The common case once anything imported the API: no provider set in code, none named
        # by the environment. Exactly the cases where both checks below answer None.
        metrics, trace = _metrics_api, _trace_api
        if metrics is None or trace is None:
            metrics, trace = _api_modules()
        try:
            if (metrics is None or (metrics._METER_PROVIDER is None and _env_names_provider is False)) and (
                trace is None or trace._TRACER_PROVIDER is None
            ):
                return False
        except AttributeError:  # an API without these globals: the checks below decide
            pass
    return _meter_provider(options) is not None or recording_span(options) is not None


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
    return provider.get_tracer(METER_NAME, __version__)


def exception_type(error: BaseException | type[BaseException]) -> str:
    """The fully qualified name of an exception's type, or of an exception type (builtins without a module)."""
    kind = error if isinstance(error, type) else type(error)
    module = kind.__module__
    return kind.__qualname__ if module == "builtins" else f"{module}.{kind.__qualname__}"


def _error_type(event: EventFields, extra: Mapping[str, Any] | None) -> str | None:
    """`error.type` of an event about a failure: the error's class, or a handled HTTP result's status."""
    name = event.name
    raised = _RAISES.get(name)
    if raised is not None:
        if raised is LockLostError and getattr(event.arguments, "mode", None) == "semaphore":
            raised = SemaphoreLeaseLostError
        return exception_type(raised)
    if event.outcome is None:  # an opening learned from the fleet or made by hand: no result, no status
        return None
    handled = name in _HANDLED or (name == "ExecutionAttempt" and getattr(event.arguments, "handled", False) is True)
    status = None if extra is None or not handled else extra.get("http.response.status_code")
    return None if status is None else str(status)


def tags(event: EventFields, options: TelemetryOptions, extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The metric tags of an event (each only when not None), and `extra` ones (`CONTEXT_TAGS`)."""
    attributes: dict[str, Any] = {"event.name": event.name, "event.severity": event.severity.value}
    if event.pipeline_name is not None:
        attributes["pipeline.name"] = event.pipeline_name
    if event.pipeline_instance is not None:
        attributes["pipeline.instance"] = event.pipeline_instance
    if event.strategy_name is not None:
        attributes["strategy.name"] = event.strategy_name
    outcome = event.outcome
    if outcome is not None and outcome.error is not None:
        attributes["exception.type"] = attributes["error.type"] = exception_type(outcome.error)
    else:
        error_type = _error_type(event, extra)
        if error_type is not None:
            attributes["error.type"] = error_type
    if options.tag_operation_key and event.operation_key is not None:
        attributes["operation.key"] = event.operation_key
    if extra is not None:
        attributes.update(extra)
    return attributes


def attributes(event: EventFields, options: TelemetryOptions) -> dict[str, Any]:
    """An event's span-event and log attributes: its tags, `operation.key` and its facts (plain values only)."""
    contextual = CONTEXT_TAGS.get()
    found = tags(event, options, None if contextual is None else contextual(event))
    if event.operation_key is not None:
        found["operation.key"] = event.operation_key
    arguments = event.arguments
    for name, field in _FACTS.get(event.name, ()):
        value = getattr(arguments, field, None)
        if isinstance(value, str | int | float):  # bool is an int
            found[name] = value
    return found


def export(event: TelemetryEvent, options: TelemetryOptions) -> None:
    """Record the event's metrics and add it to the current span, where either is active."""
    provider = _meter_provider(options)
    span = recording_span(options)
    if provider is not None:
        # Under a recording span the histograms record at once, in this context (exemplars).
        record(INSTRUMENTS.get(provider), event, options, now=span is not None)
    if span is not None:
        span.add_event(event.name, attributes(event, options))


def metrics_only(options: TelemetryOptions) -> Instruments | None:
    """The instruments to record in when a meter provider records and no span does, else None."""
    provider = _meter_provider(options)
    if provider is None or recording_span(options) is not None:
        return None
    return INSTRUMENTS.get(provider)


def _record_now(_key: _Key, histogram: Histogram, tags: Callable[[], dict[str, Any]], value: float) -> None:
    """`Batch.record`'s stand-in inside a recording span: the histogram records in the caller's context."""
    try:
        histogram.record(value, tags())
    except Exception:  # a broken provider must not break the execution
        logging.getLogger("resilience").exception("recording metrics in OpenTelemetry failed")


def record(instruments: Instruments, event: EventFields, options: TelemetryOptions, *, now: bool = False) -> None:
    """Buffer the event's measurements; the tags are built only the first time a key is seen.

    `event` is a `TelemetryEvent`, or the metrics-only path's stand-in with the same fields (the
    emitting source's, without building the event itself). `now`: record the durations at
    once (a span records, and an exemplar may take its trace), counting still batched.
    """
    name = event.name
    arguments = event.arguments
    outcome = event.outcome
    error = outcome.error if type(outcome) is Err else None  # no property call on the success path
    # Everything `tags()` reads, so that equal keys always stand for equal tags.
    key: _Key = (
        name,
        event.severity._value_,  # the string: an Enum member hashes through a Python call
        event.pipeline_name,
        event.pipeline_instance,
        event.strategy_name,
        None if error is None else type(error),
        event.operation_key if options.tag_operation_key else None,
    )
    contextual = CONTEXT_TAGS.get()
    extra = None if contextual is None else contextual(event)
    if extra is not None:
        key = (*key, *extra.items())  # the integration's tags are part of what a key stands for
    if name in _LOCK_EVENTS:
        key = (*key, getattr(arguments, "mode", None))  # a lost semaphore permit has its own error.type
    batch = instruments.batch
    if name not in _NOT_COUNTED:
        batch.record(key, instruments.events, lambda: tags(event, options, extra), 1, counted=True)
    measure = _record_now if now else batch.record
    if name == "ExecutionAttempt":
        number = getattr(arguments, "attempt", 0)
        handled = bool(getattr(arguments, "handled", False))

        def attempt_tags() -> dict[str, Any]:
            return {**tags(event, options, extra), "attempt.number": number, "attempt.handled": handled}

        duration = float(getattr(arguments, "duration", 0.0))
        measure((*key, number, handled), instruments.attempt_duration, attempt_tags, duration)
    elif name == "PipelineExecuted":
        duration = float(getattr(arguments, "duration", 0.0))
        measure(key, instruments.pipeline_duration, lambda: tags(event, options, extra), duration)
    elif name in _LOCK_EVENTS:
        waited = name in _LOCK_WAIT
        seconds = getattr(arguments, "wait_duration" if waited else "hold_duration", None)
        if seconds is not None:  # none on OnLockRenewalFailed
            histogram = instruments.lock_wait if waited else instruments.lock_hold
            measure(key, histogram, lambda: tags(event, options, extra), float(seconds))
