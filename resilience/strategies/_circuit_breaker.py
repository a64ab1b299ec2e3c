"""The circuit breaker strategy: options, manual control, state provider, and the shells.

`CircuitController` wraps one `CircuitCore` (fresh per `build()`) with a `threading.Lock`
that is never held across a call, an await, a user callback or telemetry: the core returns
`Transition`s, which are reported after the lock is released, exactly one event each. Sync
and async callers share the controller.
"""

from __future__ import annotations

import datetime as dt
import math
import threading
import weakref
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from resilience._context import new_context
from resilience._outcome import Err, Ok, Outcome
from resilience._validation import Duration, Problems, to_seconds
from resilience.exceptions import ValidationError
from resilience.strategies._circuit_core import CircuitCore, CircuitState, Transition
from resilience.strategies._common import Handle, Handler, call_back, call_back_async, check_handle
from resilience.telemetry._event import Severity

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Iterable

    from resilience._context import ResilienceContext
    from resilience._time import TimeProvider
    from resilience.strategies._base import StrategyBuildContext
    from resilience.telemetry._source import TelemetrySource

__all__ = [
    "BreakDurationGeneratorArguments",
    "CircuitBreakerManualControl",
    "CircuitBreakerStateProvider",
    "CircuitBreakerStrategy",
    "CircuitBreakerStrategyOptions",
    "OnCircuitClosedArguments",
    "OnCircuitHalfOpenedArguments",
    "OnCircuitOpenedArguments",
    "circuit_breaker_strategy",
]

T = TypeVar("T")
_CLOSED = CircuitState.CLOSED


@dataclass(frozen=True, slots=True)
class OnCircuitOpenedArguments:
    """What `on_opened` receives: the outcome that opened it (None when manual) and the break."""

    context: ResilienceContext
    outcome: Outcome[Any] | None
    break_duration: float
    """Seconds the circuit stays open (`inf` when isolated by hand)."""
    is_manual: bool


@dataclass(frozen=True, slots=True)
class OnCircuitClosedArguments:
    """What `on_closed` receives: the probe's outcome (None when closed by hand)."""

    context: ResilienceContext
    outcome: Outcome[Any] | None
    is_manual: bool


@dataclass(frozen=True, slots=True)
class OnCircuitHalfOpenedArguments:
    """What `on_half_opened` receives: the context of the call that becomes the probe."""

    context: ResilienceContext


@dataclass(frozen=True, slots=True)
class BreakDurationGeneratorArguments:
    """What `break_duration_generator` receives when the circuit opens on its own."""

    failure_rate: float
    failure_count: int
    context: ResilienceContext


class CircuitBreakerStateProvider:
    """Reads the state of the circuit it is given to (`state_provider=`); one per circuit.

    Each `build()` makes a fresh circuit; the provider follows the most recently built one.
    """

    __slots__ = ("_controller",)

    def __init__(self) -> None:
        self._controller: CircuitController | None = None

    @property
    def state(self) -> CircuitState:
        """The circuit's state (`CLOSED` until the pipeline is built)."""
        controller = self._controller
        return _CLOSED if controller is None else controller.core.state

    def __repr__(self) -> str:
        return f"<CircuitBreakerStateProvider state={self.state.name}>"


class CircuitBreakerManualControl:
    """Isolates (holds open) and closes circuits by hand; one control may drive several circuits.

    A circuit built while the control is isolated starts isolated.
    """

    __slots__ = ("_circuits", "_isolated", "_lock")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._circuits: weakref.WeakSet[CircuitController] = weakref.WeakSet()
        self._isolated = False

    @property
    def is_isolated(self) -> bool:
        """True between `isolate()` and `close()`."""
        return self._isolated

    def _attach(self, controller: CircuitController) -> None:
        with self._lock:
            self._circuits.add(controller)
            isolated = self._isolated
        if isolated:
            # Built while isolated: start isolated. No execution runs (build() may be sync or
            # async), so only the OnCircuitOpened event reports it, not on_opened.
            controller.isolate(callbacks=False)

    def _move(self, *, isolate: bool) -> list[tuple[CircuitController, Transition]]:
        with self._lock:
            self._isolated = isolate
            circuits = list(self._circuits)
        # Every circuit changes state before any callback runs, so one failing callback
        # cannot leave the other circuits behind.
        moved = [(controller, controller.move(isolate=isolate)) for controller in circuits]
        return [(controller, transition) for controller, transition in moved if transition is not None]

    def isolate(self) -> None:
        """Open every circuit of this control and hold it open (`IsolatedCircuitError`)."""
        _report_all(self._move(isolate=True))

    def close(self) -> None:
        """Close every circuit of this control (ends isolation; resets their windows)."""
        _report_all(self._move(isolate=False))

    async def isolate_async(self) -> None:
        """`isolate()`, awaiting the circuits' async `on_opened` callbacks."""
        await _report_all_async(self._move(isolate=True))

    async def close_async(self) -> None:
        """`close()`, awaiting the circuits' async `on_closed` callbacks."""
        await _report_all_async(self._move(isolate=False))

    def __repr__(self) -> str:
        return f"<CircuitBreakerManualControl isolated={self._isolated}>"


@dataclass(frozen=True, slots=True, kw_only=True)
class CircuitBreakerStrategyOptions:
    """Options of the circuit breaker (`circuit_breaker_strategy(...)`); validated at `build()`."""

    failure_ratio: float = 0.1
    minimum_throughput: int = 100
    sampling_duration: Duration = 30.0
    break_duration: Duration = 5.0
    break_duration_generator: Callable[[BreakDurationGeneratorArguments], float | dt.timedelta] | None = None
    handle: Handle = None
    manual_control: CircuitBreakerManualControl | None = None
    state_provider: CircuitBreakerStateProvider | None = None
    on_opened: Callable[[OnCircuitOpenedArguments], object] | None = None
    on_closed: Callable[[OnCircuitClosedArguments], object] | None = None
    on_half_opened: Callable[[OnCircuitHalfOpenedArguments], object] | None = None
    name: str = "CircuitBreaker"

    def validate(self, context: StrategyBuildContext, /) -> Iterable[str]:  # noqa: ARG002 - protocol
        """Every problem with these options, as `"<option>: <what>"`."""
        problems = Problems()
        ratio = self.failure_ratio
        if isinstance(ratio, bool) or not isinstance(ratio, int | float):
            problems.add("failure_ratio", f"must be a number, got {ratio!r}")
        elif math.isnan(ratio) or not 0 < ratio <= 1:
            problems.add("failure_ratio", f"must be > 0 and <= 1, got {ratio!r}")
        problems.integer("minimum_throughput", self.minimum_throughput, minimum=2)
        problems.duration("sampling_duration", self.sampling_duration, positive=True)
        problems.duration("break_duration", self.break_duration, positive=True)
        problems.callable("break_duration_generator", self.break_duration_generator)
        check_handle(problems, self.handle)
        control: object = self.manual_control
        if control is not None and not isinstance(control, CircuitBreakerManualControl):
            problems.add("manual_control", f"must be a CircuitBreakerManualControl, got {control!r}")
        provider: object = self.state_provider
        if provider is not None and not isinstance(provider, CircuitBreakerStateProvider):
            problems.add("state_provider", f"must be a CircuitBreakerStateProvider, got {provider!r}")
        problems.callable("on_opened", self.on_opened)
        problems.callable("on_closed", self.on_closed)
        problems.callable("on_half_opened", self.on_half_opened)
        problems.name("name", self.name)
        return problems.items

    def create(self, context: StrategyBuildContext, /) -> CircuitBreakerStrategy:
        """A circuit breaker with a fresh circuit."""
        core = CircuitCore(
            failure_ratio=float(self.failure_ratio),
            minimum_throughput=self.minimum_throughput,
            sampling_duration=to_seconds(self.sampling_duration),
            break_duration=to_seconds(self.break_duration),
        )
        controller = CircuitController(core, self, time_provider=context.time_provider, telemetry=context.telemetry)
        if self.state_provider is not None:
            self.state_provider._controller = controller
        if self.manual_control is not None:
            self.manual_control._attach(controller)
        return CircuitBreakerStrategy(controller, Handler(self.handle))


def circuit_breaker_strategy(
    *,
    failure_ratio: float = 0.1,
    minimum_throughput: int = 100,
    sampling_duration: Duration = 30.0,
    break_duration: Duration = 5.0,
    break_duration_generator: Callable[[BreakDurationGeneratorArguments], float | dt.timedelta] | None = None,
    handle: Handle = None,
    manual_control: CircuitBreakerManualControl | None = None,
    state_provider: CircuitBreakerStateProvider | None = None,
    on_opened: Callable[[OnCircuitOpenedArguments], object] | None = None,
    on_closed: Callable[[OnCircuitClosedArguments], object] | None = None,
    on_half_opened: Callable[[OnCircuitHalfOpenedArguments], object] | None = None,
    name: str = "CircuitBreaker",
) -> CircuitBreakerStrategyOptions:
    """Stop calling a failing dependency for a while (Polly's advanced circuit breaker).

    Opens when, within `sampling_duration`, at least `minimum_throughput` calls were made and
    the share of handled failures reached `failure_ratio`; rejects with `BrokenCircuitError`
    for `break_duration` (or what `break_duration_generator` says); then lets one probe through.
    """
    return CircuitBreakerStrategyOptions(
        failure_ratio=failure_ratio,
        minimum_throughput=minimum_throughput,
        sampling_duration=sampling_duration,
        break_duration=break_duration,
        break_duration_generator=break_duration_generator,
        handle=handle,
        manual_control=manual_control,
        state_provider=state_provider,
        on_opened=on_opened,
        on_closed=on_closed,
        on_half_opened=on_half_opened,
        name=name,
    )


def _break_seconds(value: object) -> float:
    if isinstance(value, dt.timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, int | float) and not isinstance(value, bool):
        seconds = float(value)
    else:
        msg = f"break_duration_generator returned {value!r}: return seconds (float) or a timedelta"
        raise ValidationError(msg)
    if math.isnan(seconds):
        msg = "break_duration_generator returned NaN: return seconds (float) or a timedelta"
        raise ValidationError(msg)
    return seconds


class CircuitController:
    """One circuit: the core under a lock, plus the reporting of its transitions."""

    __slots__ = ("__weakref__", "_generator", "_options", "_telemetry", "_time", "core", "lock")

    def __init__(
        self,
        core: CircuitCore,
        options: CircuitBreakerStrategyOptions,
        *,
        time_provider: TimeProvider,
        telemetry: TelemetrySource,
    ) -> None:
        self.core = core
        self.lock = threading.Lock()
        self._options = options
        self._generator = options.break_duration_generator
        self._time = time_provider
        self._telemetry = telemetry

    # -- under the lock: decisions -------------------------------------------------------------

    def admit(self) -> tuple[int, Transition | None]:
        """Admit a call (raises `BrokenCircuitError` when rejected)."""
        now = self._time.monotonic()
        with self.lock:
            return self.core.admit(now)

    def record(self, ticket: int, *, handled: bool) -> Transition | None:
        """Count the outcome of the call admitted with `ticket`."""
        now = self._time.monotonic()
        with self.lock:
            return self.core.record(now, ticket, handled=handled, pending_break=self._generator is not None)

    def succeeded(self, ticket: int) -> Transition | None:
        """Count a success (the hot path: a closed circuit just counts it)."""
        now = self._time.monotonic()
        core = self.core
        with self.lock:
            if ticket == core.generation and core.state is _CLOSED:
                core.window.success(now)
                return None
            return core.record(now, ticket, handled=False)

    def release(self, ticket: int) -> None:
        """The call admitted with `ticket` ended with a `BaseException`."""
        with self.lock:
            self.core.release(ticket)

    def set_break(self, transition: Transition, value: object) -> float:
        """Give an opening its generated break duration (default on a bad value)."""
        seconds = self.core.break_duration if value is None else _break_seconds(value)
        with self.lock:
            return self.core.set_break(transition.generation, seconds)

    # -- outside the lock: reports -------------------------------------------------------------

    def opened(
        self, transition: Transition, context: ResilienceContext, outcome: Outcome[Any] | None, seconds: float
    ) -> OnCircuitOpenedArguments:
        """Emit `OnCircuitOpened`; return the callback's arguments."""
        arguments = OnCircuitOpenedArguments(context, outcome, seconds, transition.is_manual)
        self._telemetry.emit(
            "OnCircuitOpened", Severity.ERROR, operation_key=context.operation_key, outcome=outcome, arguments=arguments
        )
        return arguments

    def closed(
        self, transition: Transition, context: ResilienceContext, outcome: Outcome[Any] | None
    ) -> OnCircuitClosedArguments:
        """Emit `OnCircuitClosed`; return the callback's arguments."""
        arguments = OnCircuitClosedArguments(context, outcome, transition.is_manual)
        self._telemetry.emit(
            "OnCircuitClosed",
            Severity.INFORMATION,
            operation_key=context.operation_key,
            outcome=outcome,
            arguments=arguments,
        )
        return arguments

    def half_opened(self, context: ResilienceContext) -> OnCircuitHalfOpenedArguments:
        """Emit `OnCircuitHalfOpened`; return the callback's arguments."""
        arguments = OnCircuitHalfOpenedArguments(context)
        self._telemetry.emit(
            "OnCircuitHalfOpened", Severity.WARNING, operation_key=context.operation_key, arguments=arguments
        )
        return arguments

    def breaking(self, transition: Transition, context: ResilienceContext) -> BreakDurationGeneratorArguments | None:
        """The generator's arguments when this opening waits for it, else None."""
        if self._generator is None or transition.state is not CircuitState.OPEN:
            return None
        return BreakDurationGeneratorArguments(transition.failure_rate, transition.failure_count, context)

    def report(self, transition: Transition, context: ResilienceContext, outcome: Outcome[Any] | None) -> None:
        """Report a transition in a sync execution (runs the generator and the callbacks)."""
        options = self._options
        state = transition.state
        if state is CircuitState.HALF_OPEN:
            arguments: object = self.half_opened(context)
            callback: Callable[[Any], object] | None = options.on_half_opened
        elif state is CircuitState.CLOSED:
            arguments = self.closed(transition, context, outcome)
            callback = options.on_closed
        else:
            seconds = math.inf if transition.is_manual else self.core.break_duration
            generating = self.breaking(transition, context)
            if generating is not None:
                value: object = None
                try:
                    value = call_back(self._generator, generating)  # type: ignore[arg-type]
                finally:
                    seconds = self.set_break(transition, value)
            arguments = self.opened(transition, context, outcome, seconds)
            callback = options.on_opened
        if callback is not None:
            call_back(callback, arguments)

    async def report_async(
        self, transition: Transition, context: ResilienceContext, outcome: Outcome[Any] | None
    ) -> None:
        """Report a transition in an async execution (awaiting async callbacks)."""
        options = self._options
        state = transition.state
        if state is CircuitState.HALF_OPEN:
            arguments: object = self.half_opened(context)
            callback: Callable[[Any], object] | None = options.on_half_opened
        elif state is CircuitState.CLOSED:
            arguments = self.closed(transition, context, outcome)
            callback = options.on_closed
        else:
            seconds = math.inf if transition.is_manual else self.core.break_duration
            generating = self.breaking(transition, context)
            if generating is not None:
                value: object = None
                try:
                    value = await call_back_async(self._generator, generating)  # type: ignore[arg-type]
                finally:
                    seconds = self.set_break(transition, value)
            arguments = self.opened(transition, context, outcome, seconds)
            callback = options.on_opened
        if callback is not None:
            await call_back_async(callback, arguments)

    # -- manual control ------------------------------------------------------------------------

    def move(self, *, isolate: bool) -> Transition | None:
        """Isolate or close by hand; the transition to report, if the state changed."""
        now = self._time.monotonic()
        with self.lock:
            return self.core.isolate(now) if isolate else self.core.close()

    def isolate(self, *, callbacks: bool = True) -> None:
        """Hold the circuit open by hand (reporting it, with or without `on_opened`)."""
        transition = self.move(isolate=True)
        if transition is not None:
            if callbacks:
                self.report(transition, new_context(), None)
            else:
                self.opened(transition, new_context(), None, math.inf)


def _report_all(moved: list[tuple[CircuitController, Transition]]) -> None:
    errors: list[Exception] = []
    for controller, transition in moved:
        try:
            controller.report(transition, new_context(), None)
        except Exception as exc:  # noqa: BLE001 - the other circuits' callbacks still run
            errors.append(exc)
    if errors:
        raise errors[0]


async def _report_all_async(moved: list[tuple[CircuitController, Transition]]) -> None:
    errors: list[Exception] = []
    for controller, transition in moved:
        try:
            await controller.report_async(transition, new_context(), None)
        except Exception as exc:  # noqa: BLE001 - the other circuits' callbacks still run
            errors.append(exc)
    if errors:
        raise errors[0]


class CircuitBreakerStrategy:
    """The built circuit breaker: admits, runs and counts calls; sync and async share the circuit."""

    __slots__ = ("_controller", "_handler")

    def __init__(self, controller: CircuitController, handler: Handler) -> None:
        self._controller = controller
        self._handler = handler

    @property
    def state(self) -> CircuitState:
        """The circuit's state."""
        return self._controller.core.state

    def execute(self, callback: Callable[[ResilienceContext], T], context: ResilienceContext, /) -> T:
        """Run `callback` if the circuit lets it through, and count its outcome (sync)."""
        controller = self._controller
        core = controller.core
        ticket = core.generation  # read before the state: a change in between voids the ticket
        if core.state is not _CLOSED:
            ticket, transition = controller.admit()
            if transition is not None:
                try:
                    controller.report(transition, context, None)
                except BaseException:
                    controller.release(ticket)
                    raise
        try:
            result = callback(context)
        except Exception as exc:
            handled = self._handler.error(exc)
            transition = controller.record(ticket, handled=handled)
            if transition is not None:
                controller.report(transition, context, Err(exc))
            raise
        except BaseException:
            controller.release(ticket)
            raise
        handler = self._handler
        handled = handler.checks_results and handler.result(result)
        transition = controller.record(ticket, handled=True) if handled else controller.succeeded(ticket)
        if transition is not None:
            controller.report(transition, context, Ok(result))
        return result

    async def execute_async(
        self, callback: Callable[[ResilienceContext], Awaitable[T]], context: ResilienceContext, /
    ) -> T:
        """Await `callback` if the circuit lets it through, and count its outcome (async)."""
        controller = self._controller
        core = controller.core
        ticket = core.generation
        if core.state is not _CLOSED:
            ticket, transition = controller.admit()
            if transition is not None:
                try:
                    await controller.report_async(transition, context, None)
                except BaseException:
                    controller.release(ticket)
                    raise
        try:
            result = await callback(context)
        except Exception as exc:
            handled = self._handler.error(exc)
            transition = controller.record(ticket, handled=handled)
            if transition is not None:
                await controller.report_async(transition, context, Err(exc))
            raise
        except BaseException:
            controller.release(ticket)
            raise
        handler = self._handler
        handled = handler.checks_results and handler.result(result)
        transition = controller.record(ticket, handled=True) if handled else controller.succeeded(ticket)
        if transition is not None:
            await controller.report_async(transition, context, Ok(result))
        return result

    def __repr__(self) -> str:
        return f"<CircuitBreakerStrategy state={self.state.name}>"
