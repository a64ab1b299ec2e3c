"""The circuit breaker strategy: its options, its factory, and the sync and async shells.

The circuit itself (state under a lock, reporting of transitions) is `CircuitController`
in `_circuit_controller.py`; its decisions are `CircuitCore` in `_circuit_core.py`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from resilience._outcome import Err, Ok
from resilience._validation import Duration, Problems, to_seconds
from resilience.strategies._circuit_controller import (
    BreakDurationGeneratorArguments,
    CircuitBreakerManualControl,
    CircuitBreakerStateProvider,
    CircuitController,
    OnCircuitClosedArguments,
    OnCircuitHalfOpenedArguments,
    OnCircuitOpenedArguments,
)
from resilience.strategies._circuit_core import CircuitCore, CircuitState
from resilience.strategies._common import Handle, Handler, check_handle

if TYPE_CHECKING:
    import datetime as dt
    from collections.abc import Awaitable, Callable, Iterable

    from resilience._context import ResilienceContext
    from resilience.strategies._base import StrategyBuildContext

__all__ = ["CircuitBreakerStrategy", "CircuitBreakerStrategyOptions", "circuit_breaker_strategy"]

T = TypeVar("T")
_CLOSED = CircuitState.CLOSED


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
