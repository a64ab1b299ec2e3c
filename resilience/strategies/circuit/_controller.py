"""One circuit's controller, its manual control and state provider, and the callbacks' arguments.

`CircuitController` wraps one `CircuitCore` (fresh per `build()`) with a `threading.Lock`
that is never held across a call, an await, a user callback or telemetry: the core returns
`Transition`s, which are reported after the lock is released, exactly one event each. Sync
and async callers share the controller.
"""

from __future__ import annotations

import threading
import weakref
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from resilience._context import new_context
from resilience._time import monotonic_source
from resilience._validation import generated_seconds
from resilience.exceptions import ValidationError
from resilience.strategies._common import Steps, call_back, call_back_async, run_steps, run_steps_async
from resilience.strategies.circuit._core import CircuitCore, CircuitState, Transition
from resilience.telemetry._event import Severity

if TYPE_CHECKING:
    from collections.abc import Callable
    from types import ModuleType

    from resilience._context import ResilienceContext
    from resilience._outcome import Outcome
    from resilience._time import TimeProvider
    from resilience.strategies._base import StrategyBuildContext
    from resilience.telemetry._source import TelemetrySource

__all__ = [
    "BreakDurationGeneratorArguments",
    "CircuitBreakerManualControl",
    "CircuitBreakerStateProvider",
    "CircuitController",
    "CircuitHooks",
    "OnCircuitClosedArguments",
    "OnCircuitHalfOpenedArguments",
    "OnCircuitOpenedArguments",
]


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


@dataclass(frozen=True, slots=True)
class CircuitHooks:
    """The user code a circuit's transitions call: its options' generator and callbacks."""

    break_duration_generator: Callable[[BreakDurationGeneratorArguments], object] | None
    on_opened: Callable[[OnCircuitOpenedArguments], object] | None
    on_closed: Callable[[OnCircuitClosedArguments], object] | None
    on_half_opened: Callable[[OnCircuitHalfOpenedArguments], object] | None


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
        return CircuitState.CLOSED if controller is None else controller.core.state

    def __repr__(self) -> str:
        return f"<CircuitBreakerStateProvider state={self.state.name}>"


class CircuitBreakerManualControl:
    """Isolates (holds open) and closes circuits by hand; one control may drive several circuits.

    A circuit built while the control is isolated starts isolated. A control of a shared
    circuit follows the manual moves the fleet makes elsewhere: closed by hand in another
    process, it is no longer isolated here (and isolated there, it is isolated here).
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
            transition = controller.move(isolate=True)
            if transition is not None:
                controller.announce(transition, new_context())

    def _follow(self, *, isolated: bool) -> None:
        """A shared circuit of this control learned a manual move made elsewhere in the fleet."""
        with self._lock:
            self._isolated = isolated

    def _move(self, *, isolate: bool) -> list[tuple[CircuitController, Transition | None]]:
        with self._lock:
            self._isolated = isolate
            circuits = list(self._circuits)
        # Every circuit changes state before any callback runs, so one failing callback
        # cannot leave the other circuits behind (a circuit that did not move reports nothing).
        return [(controller, controller.move(isolate=isolate)) for controller in circuits]

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


class CircuitController:
    """One circuit: the core under a lock, plus the reporting of its transitions."""

    __slots__ = ("__weakref__", "_generator", "_hooks", "_telemetry", "_time", "core", "lock")

    def __init__(self, core: CircuitCore, hooks: CircuitHooks, context: StrategyBuildContext) -> None:
        self.core = core
        self.lock = threading.Lock()
        self._hooks = hooks
        self._generator = hooks.break_duration_generator
        # What `.monotonic()` is read on: the system clock without its provider's method frame.
        self._time: ModuleType | TimeProvider = monotonic_source(context.time_provider)
        self._telemetry: TelemetrySource = context.telemetry

    # -- under the lock: decisions -------------------------------------------------------------

    def admit(self) -> tuple[int, Transition | None]:
        """Admit a call (raises `BrokenCircuitError` when rejected)."""
        now = self._time.monotonic()
        with self.lock:
            return self.core.admit(now)

    def record(self, ticket: int, *, handled: bool) -> Transition | None:
        """Count the outcome of the call admitted with `ticket` (`handled`: a handled failure).

        A local circuit's closed-state success that needs no lock is counted by the strategy
        itself, without this call (`CircuitBreakerStrategy.__init__`).
        """
        now = self._time.monotonic()
        with self.lock:
            return self.core.record(now, ticket, handled=handled, pending_break=self._generator is not None)

    def release(self, ticket: int) -> None:
        """The call admitted with `ticket` ended with a `BaseException`."""
        with self.lock:
            self.core.release(ticket)

    def set_break(self, transition: Transition, value: object) -> tuple[float, ValidationError | None]:
        """Give an opening its generated break duration: the seconds it lasts, and the misuse a bad value is.

        A value that is no duration gets the default break (the circuit must never stay open
        without an end) and its `ValidationError`, for the shell to raise once reported.
        """
        expected = "seconds (float) or a timedelta"
        misuse = None
        try:
            seconds = generated_seconds(value, self.core.break_duration, "break_duration_generator", expected)
        except ValidationError as exc:
            seconds, misuse = self.core.break_duration, exc
        with self.lock:
            return self.core.set_break(transition.generation, seconds), misuse

    # -- outside the lock: reports -------------------------------------------------------------

    def _generated(self, arguments: BreakDurationGeneratorArguments) -> tuple[object, Exception | None]:
        """The break-duration generator's answer in a sync execution, or the error it raised."""
        try:
            return call_back(self._generator, arguments), None  # type: ignore[arg-type] # asked only when set
        except Exception as exc:  # noqa: BLE001 - raised once the opening is reported
            return None, exc

    async def _generated_async(self, arguments: BreakDurationGeneratorArguments) -> tuple[object, Exception | None]:
        """`_generated` in an async execution (an awaitable answer is awaited)."""
        try:
            return await call_back_async(self._generator, arguments), None  # type: ignore[arg-type] # asked only when set
        except Exception as exc:  # noqa: BLE001 - raised once the opening is reported
            return None, exc

    def _steps(
        self,
        transition: Transition,
        context: ResilienceContext,
        outcome: Outcome[Any] | None,
        generate: Callable[[BreakDurationGeneratorArguments], object],
    ) -> Steps:
        """Emit `transition`'s event and yield its callback, for both shells.

        An opening of this circuit's own with a break-duration generator yields `generate`
        first (the shell's way to call the generator: the shell sends back its answer and the
        error it raised), sets the break it answered (the default if it raised, answered no
        duration or was interrupted) and only then emits the opening; the generator's error, or
        the `ValidationError` of an answer that is no duration, is raised after the opening is
        reported. Any other opening knows its break (`Transition.break_duration`).
        """
        arguments: Any
        callback: Callable[[Any], object] | None
        misuse = None
        if transition.state is CircuitState.HALF_OPEN:  # the outcome is None: no call has ended
            name, severity, callback = "OnCircuitHalfOpened", Severity.WARNING, self._hooks.on_half_opened
            arguments = OnCircuitHalfOpenedArguments(context)
        elif transition.state is CircuitState.CLOSED:
            name, severity, callback = "OnCircuitClosed", Severity.INFORMATION, self._hooks.on_closed
            arguments = OnCircuitClosedArguments(context, outcome, transition.is_manual)
        else:
            seconds = transition.break_duration
            if seconds is None:  # the generator decides
                generating = BreakDurationGeneratorArguments(transition.failure_rate, transition.failure_count, context)
                answer: Any = (None, None)
                try:
                    answer = yield generate, generating
                finally:  # the default unless the generator answered a duration
                    seconds, misuse = self.set_break(transition, answer[0])
                misuse = answer[1] or misuse
            name, severity, callback = "OnCircuitOpened", Severity.ERROR, self._hooks.on_opened
            arguments = OnCircuitOpenedArguments(context, outcome, seconds, transition.is_manual)
        self._telemetry.emit(name, severity, operation_key=context.operation_key, outcome=outcome, arguments=arguments)
        if callback is not None:
            yield callback, arguments
        if misuse is not None:
            raise misuse  # the opening is reported, with its default break: now the caller learns of the misuse
        yield None, None

    def announce(self, transition: Transition, context: ResilienceContext) -> None:
        """Emit the event of a transition that knows its break, with no callback (no execution runs)."""
        next(self._steps(transition, context, None, self._generated))

    def report(self, transition: Transition | None, context: ResilienceContext, outcome: Outcome[Any] | None) -> None:
        """Report a transition (if any) in a sync execution (runs the generator and the callbacks)."""
        if transition is not None:
            run_steps(self._steps(transition, context, outcome, self._generated))

    async def report_async(
        self, transition: Transition | None, context: ResilienceContext, outcome: Outcome[Any] | None
    ) -> None:
        """Report a transition (if any) in an async execution (awaiting async callbacks)."""
        if transition is not None:
            await run_steps_async(self._steps(transition, context, outcome, self._generated_async))

    # -- manual control ------------------------------------------------------------------------

    def move(self, *, isolate: bool) -> Transition | None:
        """Isolate or close by hand; the transition to report, if the state changed."""
        now = self._time.monotonic()
        with self.lock:
            return self.core.isolate(now) if isolate else self.core.close()


def _report_all(moved: list[tuple[CircuitController, Transition | None]]) -> None:
    errors: list[Exception] = []
    for controller, transition in moved:
        try:
            controller.report(transition, new_context(), None)
        except Exception as exc:  # noqa: BLE001 - the other circuits' callbacks still run
            errors.append(exc)
    if errors:
        raise errors[0]


async def _report_all_async(moved: list[tuple[CircuitController, Transition | None]]) -> None:
    errors: list[Exception] = []
    for controller, transition in moved:
        try:
            await controller.report_async(transition, new_context(), None)
        except Exception as exc:  # noqa: BLE001 - the other circuits' callbacks still run
            errors.append(exc)
    if errors:
        raise errors[0]
