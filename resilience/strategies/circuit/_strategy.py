"""The circuit breaker strategy: its options, its factory, and the sync and async shells.

The circuit itself (state under a lock, reporting of transitions) is `CircuitController`
in `_controller.py`; its decisions are `CircuitCore` in `_core.py`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from resilience._outcome import Err, Ok
from resilience._validation import Duration, Problems, to_seconds
from resilience.exceptions import ValidationError
from resilience.strategies._base import HANDS_ON, StrategyTraits
from resilience.strategies._common import Handle, Handler, check_handle
from resilience.strategies.circuit._controller import (
    BreakDurationGeneratorArguments,
    CircuitBreakerManualControl,
    CircuitBreakerStateProvider,
    CircuitController,
    CircuitHooks,
    OnCircuitClosedArguments,
    OnCircuitHalfOpenedArguments,
    OnCircuitOpenedArguments,
)
from resilience.strategies.circuit._core import CircuitCore, CircuitState, ConsecutiveFailures, RollingWindow

if TYPE_CHECKING:
    import datetime as dt
    from collections.abc import Awaitable, Callable, Iterable

    from resilience._context import ResilienceContext
    from resilience.stores._redis_circuit import RedisCircuitStateStore
    from resilience.strategies._base import StrategyBuildContext

__all__ = ["CircuitBreakerStrategy", "CircuitBreakerStrategyOptions", "circuit_breaker_strategy"]

T = TypeVar("T")
# The streak of a circuit whose success its count does not decide: one failure that nothing
# resets, so the strategy's test of a zero count needs no test of None first.
_NO_STREAK = ConsecutiveFailures(1)
_NO_STREAK.count = 1
# `resilience.circuit.state`: how an alert reads a circuit's state.
_STATE_NUMBERS = {CircuitState.CLOSED: 0, CircuitState.HALF_OPEN: 1, CircuitState.OPEN: 2, CircuitState.ISOLATED: 3}


@dataclass(frozen=True, slots=True, kw_only=True)
class CircuitBreakerStrategyOptions:
    """Options of the circuit breaker (`circuit_breaker_strategy(...)`); validated at `build()`."""

    failure_ratio: float = 0.1
    minimum_throughput: int = 100
    sampling_duration: Duration = 30.0
    consecutive_failures: int | None = None
    break_duration: Duration = 5.0
    break_duration_generator: Callable[[BreakDurationGeneratorArguments], float | dt.timedelta] | None = None
    handle: Handle = None
    manual_control: CircuitBreakerManualControl | None = None
    state_provider: CircuitBreakerStateProvider | None = None
    on_opened: Callable[[OnCircuitOpenedArguments], object] | None = None
    on_closed: Callable[[OnCircuitClosedArguments], object] | None = None
    on_half_opened: Callable[[OnCircuitHalfOpenedArguments], object] | None = None
    state_store: RedisCircuitStateStore | None = None
    circuit_key: str | None = None
    sync_interval: Duration = 0.1
    name: str = "CircuitBreaker"

    def validate(self, context: StrategyBuildContext, /) -> Iterable[str]:
        """Every problem with these options, as `"<option>: <what>"`."""
        problems = Problems()
        ratio = self.failure_ratio
        if isinstance(ratio, bool) or not isinstance(ratio, int | float):
            problems.add("failure_ratio", f"must be a number, got {ratio!r}")
        elif math.isnan(ratio) or not 0 < ratio <= 1:
            problems.add("failure_ratio", f"must be > 0 and <= 1, got {ratio!r}")
        problems.integer("minimum_throughput", self.minimum_throughput, minimum=2)
        sampling = problems.duration("sampling_duration", self.sampling_duration, positive=True)
        if self.consecutive_failures is not None:
            problems.integer("consecutive_failures", self.consecutive_failures, minimum=1)
            # The ratio's options mean nothing to a count of failures in a row: a value other
            # than the default says the caller expects something this mode does not do.
            for option, value, default in (
                ("failure_ratio", ratio, _DEFAULTS.failure_ratio),
                ("minimum_throughput", self.minimum_throughput, _DEFAULTS.minimum_throughput),
                ("sampling_duration", sampling, _DEFAULTS.sampling_duration),
            ):
                if value is not None and value != default:
                    problems.add(option, f"must be left at its default with consecutive_failures (got {value!r})")
        problems.duration("break_duration", self.break_duration, positive=True)
        problems.callable("break_duration_generator", self.break_duration_generator)
        check_handle(problems, self.handle)
        control: object = self.manual_control
        if control is not None and not isinstance(control, CircuitBreakerManualControl):
            problems.add("manual_control", f"must be a CircuitBreakerManualControl, got {control!r}")
        provider: object = self.state_provider
        if provider is not None and not isinstance(provider, CircuitBreakerStateProvider):
            problems.add("state_provider", f"must be a CircuitBreakerStateProvider, got {provider!r}")
        for option in ("on_opened", "on_closed", "on_half_opened"):
            problems.callable(option, getattr(self, option))
        self._validate_sharing(problems, context)
        problems.name("name", self.name)
        return problems.items

    def _validate_sharing(self, problems: Problems, context: StrategyBuildContext) -> None:
        from resilience.stores._redis_circuit import check_state_store

        problem = check_state_store(self.state_store)
        if problem is not None:
            problems.add("state_store", problem)
        if self.state_store is not None and self.break_duration_generator is not None:
            # The fleet's break is decided in the store, for every process alike.
            problems.add(
                "break_duration_generator",
                "cannot be used with a state_store: a shared circuit's break is break_duration, for the whole fleet",
            )
        problems.duration("sync_interval", self.sync_interval, positive=True)
        key: object = self.circuit_key
        if key is not None and (not isinstance(key, str) or not key):
            problems.add("circuit_key", f"must be a non-empty str, got {key!r}")
        elif key is not None and self.state_store is None:
            problems.add("circuit_key", "needs a state_store (a circuit without one is not shared)")
        elif key is None and self.state_store is not None and not context.pipeline_name:
            problems.add("circuit_key", "give one, or name the pipeline: the default is '<pipeline name>/<name>'")

    def shared_key(self, context: StrategyBuildContext) -> str:
        """The key the fleet shares this circuit under."""
        return self.circuit_key if self.circuit_key is not None else f"{context.pipeline_name}/{self.name}"

    def create(self, context: StrategyBuildContext, /) -> CircuitBreakerStrategy:
        """A circuit breaker with a fresh circuit (shared with the fleet when there is a `state_store`)."""
        parameters: dict[str, Any] = {
            "failure_ratio": float(self.failure_ratio),
            "minimum_throughput": self.minimum_throughput,
            "sampling_duration": to_seconds(self.sampling_duration),
            "break_duration": to_seconds(self.break_duration),
            "consecutive_failures": self.consecutive_failures,
        }
        hooks = CircuitHooks(self.break_duration_generator, self.on_opened, self.on_closed, self.on_half_opened)
        store = self.state_store
        controller: CircuitController
        if store is None:
            controller = CircuitController(CircuitCore(**parameters), hooks, context)
            tags = {}
        else:
            from resilience.strategies.circuit._fleet import SharedCircuitCore
            from resilience.strategies.circuit._sync import CircuitSync, SharedCircuitController

            key = self.shared_key(context)
            controller = SharedCircuitController(SharedCircuitCore(**parameters), hooks, context)
            CircuitSync(store, key, to_seconds(self.sync_interval), self.manual_control).start(controller, context)
            tags = {"circuit.key": key}
        context.telemetry.observe("resilience.circuit.state", controller, lambda c: _STATE_NUMBERS[c.core.state], tags)
        if self.state_provider is not None:
            self.state_provider._controller = controller
        if self.manual_control is not None:
            self.manual_control._attach(controller)
        if store is not None and not store.has_sync_client:
            return _AsyncSharedCircuitBreakerStrategy(controller, Handler(self.handle))
        return CircuitBreakerStrategy(controller, Handler(self.handle))


_DEFAULTS = CircuitBreakerStrategyOptions()


def circuit_breaker_strategy(
    *,
    failure_ratio: float = 0.1,
    minimum_throughput: int = 100,
    sampling_duration: Duration = 30.0,
    consecutive_failures: int | None = None,
    break_duration: Duration = 5.0,
    break_duration_generator: Callable[[BreakDurationGeneratorArguments], float | dt.timedelta] | None = None,
    handle: Handle = None,
    manual_control: CircuitBreakerManualControl | None = None,
    state_provider: CircuitBreakerStateProvider | None = None,
    on_opened: Callable[[OnCircuitOpenedArguments], object] | None = None,
    on_closed: Callable[[OnCircuitClosedArguments], object] | None = None,
    on_half_opened: Callable[[OnCircuitHalfOpenedArguments], object] | None = None,
    state_store: RedisCircuitStateStore | None = None,
    circuit_key: str | None = None,
    sync_interval: Duration = 0.1,
    name: str = "CircuitBreaker",
) -> CircuitBreakerStrategyOptions:
    """Stop calling a failing dependency for a while (Polly's advanced circuit breaker).

    Opens when, within `sampling_duration`, at least `minimum_throughput` calls were made and
    the share of handled failures reached `failure_ratio`; rejects with `BrokenCircuitError`
    for `break_duration` (or what `break_duration_generator` says); then lets one probe through.

    With `consecutive_failures=n` it opens instead after `n` handled failures in a row, and any
    success (or unhandled outcome) starts the count again (pybreaker's `fail_max`, Polly v7's
    basic breaker); `failure_ratio`, `minimum_throughput` and `sampling_duration` then stay at
    their defaults. Everything else (break, probe, manual control, events) is the same.

    With a `state_store` (`resilience.stores.RedisCircuitStateStore`), every process using the
    same `circuit_key` (default `"<pipeline name>/<name>"`) shares one circuit: the ratio over
    the fleet's outcomes, one probe for the fleet, isolation from any process. Outcomes are
    counted locally and sent in the background at most every `sync_interval`; calls never wait
    for Redis, and while it is unreachable the circuit decides on local state.
    With `consecutive_failures`, each process counts its own failures in a row, and an
    opening decided by any process opens the circuit for the fleet.
    """
    return CircuitBreakerStrategyOptions(**locals())


class CircuitBreakerStrategy:
    """The built circuit breaker: admits, runs and counts calls; sync and async share the circuit."""

    traits = HANDS_ON

    __slots__ = ("_clock", "_controller", "_core", "_handler", "_rolling", "_streak")

    def __init__(self, controller: CircuitController, handler: Handler) -> None:
        self._controller = controller
        self._core = core = controller.core
        self._handler = handler
        self._clock = controller._time
        # A local circuit whose results are never failures counts a closed-state success itself,
        # without the controller's call or its lock (a shared circuit counts every success under
        # it, for the fleet's batch). Consecutive failures: a success with no failure in a row
        # to reset changes nothing (`ConsecutiveFailures`: never zero while half-open, so a
        # probe's success still closes). A rolling window: the success is one atomic step of
        # the bucket current at its time (`Bucket`), if the ticket is still closed and current.
        local = type(controller) is CircuitController and not handler.checks_results
        window = core.window
        self._streak = window if local and type(window) is ConsecutiveFailures else _NO_STREAK
        self._rolling = window if local and type(window) is RollingWindow else None

    @property
    def state(self) -> CircuitState:
        """The circuit's state."""
        return self._core.state

    def execute(self, callback: Callable[[ResilienceContext], T], context: ResilienceContext, /) -> T:
        """Run `callback` if the circuit lets it through, and count its outcome (sync)."""
        ticket = self._core.ticket  # the generation if closed: the call is admitted without the controller
        if ticket is None:
            ticket, transition = self._controller.admit()
            try:
                self._controller.report(transition, context, None)
            except BaseException:
                self._controller.release(ticket)
                raise
        try:
            result = callback(context)
        except Exception as exc:
            transition = self._controller.record(ticket, handled=self._handler.error(exc))
            if transition is not None:
                self._controller.report(transition, context, Err(exc))
            raise
        except BaseException:
            self._controller.release(ticket)
            raise
        if not self._streak.count:
            return result  # nothing to reset (see __init__)
        rolling = self._rolling
        if rolling is not None:
            now = self._clock.monotonic()
            bucket = rolling.current  # read before the ticket's check: a close after it detaches the bucket
            if bucket and now - bucket.start < rolling.width and ticket == self._core.ticket:
                next(bucket.successes)
                return result
        transition = self._controller.record(
            ticket, handled=self._handler.checks_results and self._handler.result(result)
        )
        if transition is not None:  # a shared or result-checking circuit's success: no outcome made for nothing
            self._controller.report(transition, context, Ok(result))
        return result

    async def execute_async(
        self, callback: Callable[[ResilienceContext], Awaitable[T]], context: ResilienceContext, /
    ) -> T:
        """Await `callback` if the circuit lets it through, and count its outcome (async)."""
        ticket = self._core.ticket
        if ticket is None:
            ticket, transition = self._controller.admit()
            try:
                await self._controller.report_async(transition, context, None)
            except BaseException:
                self._controller.release(ticket)
                raise
        try:
            result = await callback(context)
        except Exception as exc:
            transition = self._controller.record(ticket, handled=self._handler.error(exc))
            if transition is not None:
                await self._controller.report_async(transition, context, Err(exc))
            raise
        except BaseException:
            self._controller.release(ticket)
            raise
        if not self._streak.count:
            return result  # nothing to reset (see __init__)
        rolling = self._rolling
        if rolling is not None:
            now = self._clock.monotonic()
            bucket = rolling.current
            if bucket and now - bucket.start < rolling.width and ticket == self._core.ticket:
                next(bucket.successes)
                return result
        transition = self._controller.record(
            ticket, handled=self._handler.checks_results and self._handler.result(result)
        )
        if transition is not None:  # a shared or result-checking circuit's success: no outcome made for nothing
            await self._controller.report_async(transition, context, Ok(result))
        return result

    def __repr__(self) -> str:
        return f"<CircuitBreakerStrategy state={self.state.name}>"


_ASYNC_ONLY = (
    "this circuit is shared through a RedisCircuitStateStore with only an asyncio client: "
    "run it with execute_async, or give the store a sync client= too"
)


class _AsyncSharedCircuitBreakerStrategy(CircuitBreakerStrategy):
    """A circuit shared through a store that has only an asyncio client: its sync is a task."""

    __slots__ = ()

    traits = StrategyTraits(sync_problem=_ASYNC_ONLY, hands_on_context=True)
    """A sync execution is refused (the pipeline refuses it before anything runs)."""

    def execute(self, callback: Callable[[ResilienceContext], T], context: ResilienceContext, /) -> T:  # noqa: ARG002
        """Refused: the sync of this circuit needs a running event loop."""
        raise ValidationError(_ASYNC_ONLY)

    async def execute_async(
        self, callback: Callable[[ResilienceContext], Awaitable[T]], context: ResilienceContext, /
    ) -> T:
        """Start the circuit's sync on this loop if needed, then as `CircuitBreakerStrategy`.

        The first call on a loop waits (bounded) for that loop's first exchange.
        """
        await self._controller.sync.first_exchange()  # type: ignore[attr-defined]
        return await super().execute_async(callback, context)
