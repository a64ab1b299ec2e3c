"""The chaos strategies (Polly's Simmy): inject faults, latency, outcomes or behaviors on purpose.

Each one asks the shared decision (`ChaosStrategyBase`, see `_injection.py`) whether this
execution gets chaos; if not, it calls the inner pipeline unchanged. When it injects it emits
its event (Information) and runs its `on_*_injected` callback, then:

- fault: raises the fault instead of calling the inner pipeline;
- latency: waits on the time provider (ending at once, with the signal's reason, when the
  signal aborts), then calls the inner pipeline;
- outcome: returns `Ok(v)`'s value or raises `Err(e)`'s error instead of calling it;
- behavior: runs the behavior, then calls the inner pipeline.

Options that can never inject (`enabled=False` or `injection_rate=0` without the matching
generator) build an inert strategy that `build()` leaves out of the pipeline.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from resilience._outcome import Err, Outcome
from resilience._validation import Duration, generated_seconds, to_seconds
from resilience.exceptions import ValidationError
from resilience.strategies._base import StrategyTraits
from resilience.strategies.chaos._injection import (
    ChaosStrategyBase,
    EnabledGeneratorArguments,
    InjectionRateGeneratorArguments,
    chaos_problems,
    check_fault,
    fresh_fault,
)

if TYPE_CHECKING:
    import datetime as dt
    from collections.abc import Awaitable, Callable, Iterable

    from resilience._context import ResilienceContext
    from resilience.strategies._base import StrategyBuildContext
    from resilience.strategies._common import Steps

__all__ = [
    "BehaviorGeneratorArguments",
    "ChaosBehaviorStrategyOptions",
    "ChaosFaultStrategyOptions",
    "ChaosLatencyStrategyOptions",
    "ChaosOutcomeStrategyOptions",
    "EnabledGeneratorArguments",
    "FaultGeneratorArguments",
    "InjectionRateGeneratorArguments",
    "LatencyGeneratorArguments",
    "OnBehaviorInjectedArguments",
    "OnFaultInjectedArguments",
    "OnLatencyInjectedArguments",
    "OnOutcomeInjectedArguments",
    "OutcomeGeneratorArguments",
    "chaos_behavior_strategy",
    "chaos_fault_strategy",
    "chaos_latency_strategy",
    "chaos_outcome_strategy",
]

T = TypeVar("T")


# -- arguments --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class FaultGeneratorArguments:
    """What `fault_generator` receives when an execution is chosen for a fault."""

    context: ResilienceContext


@dataclass(frozen=True, slots=True)
class OnFaultInjectedArguments:
    """What `on_fault_injected` receives: the exception about to be raised."""

    context: ResilienceContext
    fault: Exception


@dataclass(frozen=True, slots=True)
class LatencyGeneratorArguments:
    """What `latency_generator` receives when an execution is chosen for latency."""

    context: ResilienceContext


@dataclass(frozen=True, slots=True)
class OnLatencyInjectedArguments:
    """What `on_latency_injected` receives before the wait: its length in seconds."""

    context: ResilienceContext
    latency: float


@dataclass(frozen=True, slots=True)
class OutcomeGeneratorArguments:
    """What `outcome_generator` receives when an execution is chosen for an outcome."""

    context: ResilienceContext


@dataclass(frozen=True, slots=True)
class OnOutcomeInjectedArguments:
    """What `on_outcome_injected` receives: the outcome that replaces the call."""

    context: ResilienceContext
    outcome: Outcome[Any]


@dataclass(frozen=True, slots=True)
class BehaviorGeneratorArguments:
    """What a chaos `behavior` receives, before the callable runs."""

    context: ResilienceContext


@dataclass(frozen=True, slots=True)
class OnBehaviorInjectedArguments:
    """What `on_behavior_injected` receives, before the behavior runs."""

    context: ResilienceContext


# -- options ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class _ChaosOptions:
    injection_rate: float = 0.001
    injection_rate_generator: Callable[[InjectionRateGeneratorArguments], float | Awaitable[float]] | None = None
    enabled: bool = True
    enabled_generator: Callable[[EnabledGeneratorArguments], bool | Awaitable[bool]] | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ChaosFaultStrategyOptions(_ChaosOptions):
    """Options of the fault chaos strategy (`chaos_fault_strategy(...)`); validated at `build()`."""

    fault: Exception | type[Exception] | None = None
    fault_generator: Callable[[FaultGeneratorArguments], Exception | Awaitable[Exception | None] | None] | None = None
    on_fault_injected: Callable[[OnFaultInjectedArguments], object] | None = None
    name: str = "ChaosFault"

    def validate(self, context: StrategyBuildContext, /) -> Iterable[str]:  # noqa: ARG002 - protocol
        """Every problem with these options, as `"<option>: <what>"`."""
        problems = chaos_problems(self)
        if self.fault is None and self.fault_generator is None:
            problems.add("fault", "give fault or fault_generator")
        elif self.fault is not None:
            check_fault(problems, "fault", self.fault)
        problems.callable("fault_generator", self.fault_generator)
        problems.callable("on_fault_injected", self.on_fault_injected)
        return problems.items

    def create(self, context: StrategyBuildContext, /) -> ChaosFaultStrategy:
        """A fault chaos strategy for one built pipeline."""
        return ChaosFaultStrategy(self, context)


@dataclass(frozen=True, slots=True, kw_only=True)
class ChaosLatencyStrategyOptions(_ChaosOptions):
    """Options of the latency chaos strategy (`chaos_latency_strategy(...)`); validated at `build()`."""

    latency: Duration
    latency_generator: (
        Callable[[LatencyGeneratorArguments], float | dt.timedelta | Awaitable[float | dt.timedelta | None] | None]
        | None
    ) = None
    on_latency_injected: Callable[[OnLatencyInjectedArguments], object] | None = None
    name: str = "ChaosLatency"

    def validate(self, context: StrategyBuildContext, /) -> Iterable[str]:  # noqa: ARG002 - protocol
        """Every problem with these options, as `"<option>: <what>"`."""
        problems = chaos_problems(self)
        problems.duration("latency", self.latency)
        problems.callable("latency_generator", self.latency_generator)
        problems.callable("on_latency_injected", self.on_latency_injected)
        return problems.items

    def create(self, context: StrategyBuildContext, /) -> ChaosLatencyStrategy:
        """A latency chaos strategy for one built pipeline."""
        return ChaosLatencyStrategy(self, context)


@dataclass(frozen=True, slots=True, kw_only=True)
class ChaosOutcomeStrategyOptions(_ChaosOptions):
    """Options of the outcome chaos strategy (`chaos_outcome_strategy(...)`); validated at `build()`."""

    outcome: Outcome[Any] | None = None
    outcome_generator: (
        Callable[[OutcomeGeneratorArguments], Outcome[Any] | Awaitable[Outcome[Any] | None] | None] | None
    ) = None
    on_outcome_injected: Callable[[OnOutcomeInjectedArguments], object] | None = None
    name: str = "ChaosOutcome"

    def validate(self, context: StrategyBuildContext, /) -> Iterable[str]:  # noqa: ARG002 - protocol
        """Every problem with these options, as `"<option>: <what>"`."""
        problems = chaos_problems(self)
        outcome: object = self.outcome
        if outcome is None and self.outcome_generator is None:
            problems.add("outcome", "give outcome or outcome_generator")
        elif outcome is not None and not isinstance(outcome, Outcome):
            problems.add("outcome", f"must be an Outcome (Ok(value) or Err(exception)), got {outcome!r}")
        elif isinstance(outcome, Err):
            check_fault(problems, "outcome", outcome.error)
        problems.callable("outcome_generator", self.outcome_generator)
        problems.callable("on_outcome_injected", self.on_outcome_injected)
        return problems.items

    def create(self, context: StrategyBuildContext, /) -> ChaosOutcomeStrategy:
        """An outcome chaos strategy for one built pipeline."""
        return ChaosOutcomeStrategy(self, context)


@dataclass(frozen=True, slots=True, kw_only=True)
class ChaosBehaviorStrategyOptions(_ChaosOptions):
    """Options of the behavior chaos strategy (`chaos_behavior_strategy(...)`); validated at `build()`."""

    behavior: Callable[[BehaviorGeneratorArguments], object]
    on_behavior_injected: Callable[[OnBehaviorInjectedArguments], object] | None = None
    name: str = "ChaosBehavior"

    def validate(self, context: StrategyBuildContext, /) -> Iterable[str]:  # noqa: ARG002 - protocol
        """Every problem with these options, as `"<option>: <what>"`."""
        problems = chaos_problems(self)
        problems.callable("behavior", self.behavior, allow_none=False)
        problems.callable("on_behavior_injected", self.on_behavior_injected)
        return problems.items

    def create(self, context: StrategyBuildContext, /) -> ChaosBehaviorStrategy:
        """A behavior chaos strategy for one built pipeline."""
        return ChaosBehaviorStrategy(self, context)


# -- factories --------------------------------------------------------------------------------


def chaos_fault_strategy(
    *,
    injection_rate: float = 0.001,
    injection_rate_generator: Callable[[InjectionRateGeneratorArguments], float | Awaitable[float]] | None = None,
    fault: Exception | type[Exception] | None = None,
    fault_generator: Callable[[FaultGeneratorArguments], Exception | Awaitable[Exception | None] | None] | None = None,
    enabled: bool = True,
    enabled_generator: Callable[[EnabledGeneratorArguments], bool | Awaitable[bool]] | None = None,
    on_fault_injected: Callable[[OnFaultInjectedArguments], object] | None = None,
    name: str = "ChaosFault",
) -> ChaosFaultStrategyOptions:
    """Raise a fault instead of calling the inner pipeline, for a share of executions.

    `fault` is an exception (each injection raises a copy) or an exception class (each
    injection raises a new instance); `fault_generator(args)` may make one per injection
    (None: no injection). `injection_rate` (0 to 1) or `injection_rate_generator` sets the
    share; `enabled` or `enabled_generator` (which wins) switches it at run time.
    """
    return ChaosFaultStrategyOptions(**locals())


def chaos_latency_strategy(
    *,
    latency: Duration,
    latency_generator: (
        Callable[[LatencyGeneratorArguments], float | dt.timedelta | Awaitable[float | dt.timedelta | None] | None]
        | None
    ) = None,
    injection_rate: float = 0.001,
    injection_rate_generator: Callable[[InjectionRateGeneratorArguments], float | Awaitable[float]] | None = None,
    enabled: bool = True,
    enabled_generator: Callable[[EnabledGeneratorArguments], bool | Awaitable[bool]] | None = None,
    on_latency_injected: Callable[[OnLatencyInjectedArguments], object] | None = None,
    name: str = "ChaosLatency",
) -> ChaosLatencyStrategyOptions:
    """Wait `latency` seconds before calling the inner pipeline, for a share of executions.

    The wait runs on the time provider and ends at once when the execution's signal aborts
    (the signal's reason is raised; the callable does not run). `latency_generator(args)` may
    choose each latency (None: `latency`; zero or less: no injection).
    """
    return ChaosLatencyStrategyOptions(**locals())


def chaos_outcome_strategy(
    *,
    outcome: Outcome[Any] | None = None,
    outcome_generator: (
        Callable[[OutcomeGeneratorArguments], Outcome[Any] | Awaitable[Outcome[Any] | None] | None] | None
    ) = None,
    injection_rate: float = 0.001,
    injection_rate_generator: Callable[[InjectionRateGeneratorArguments], float | Awaitable[float]] | None = None,
    enabled: bool = True,
    enabled_generator: Callable[[EnabledGeneratorArguments], bool | Awaitable[bool]] | None = None,
    on_outcome_injected: Callable[[OnOutcomeInjectedArguments], object] | None = None,
    name: str = "ChaosOutcome",
) -> ChaosOutcomeStrategyOptions:
    """Replace the call with an outcome, for a share of executions.

    `Ok(value)` returns `value` without calling the inner pipeline; `Err(exception)` raises a
    copy of `exception`. `outcome_generator(args)` may choose one per injection (None: no
    injection).
    """
    return ChaosOutcomeStrategyOptions(**locals())


def chaos_behavior_strategy(
    *,
    behavior: Callable[[BehaviorGeneratorArguments], object],
    injection_rate: float = 0.001,
    injection_rate_generator: Callable[[InjectionRateGeneratorArguments], float | Awaitable[float]] | None = None,
    enabled: bool = True,
    enabled_generator: Callable[[EnabledGeneratorArguments], bool | Awaitable[bool]] | None = None,
    on_behavior_injected: Callable[[OnBehaviorInjectedArguments], object] | None = None,
    name: str = "ChaosBehavior",
) -> ChaosBehaviorStrategyOptions:
    """Run `behavior(args)` before the callable, for a share of executions.

    The behavior may do anything a real incident does (drop a cache, restart a dependency,
    fill a disk); an awaitable it returns is awaited in async executions; if it raises, the
    exception propagates and the callable does not run.
    """
    return ChaosBehaviorStrategyOptions(**locals())


# -- strategies -------------------------------------------------------------------------------


def _checked(value: object, kind: type, option: str, expected: str) -> Any:
    """A generator's return value if it is None or a `kind`; anything else is misuse."""
    if value is None or isinstance(value, kind):
        return value
    msg = f"{option} returned {value!r}: return {expected}"
    raise ValidationError(msg)


class ChaosFaultStrategy(ChaosStrategyBase):
    """The built fault chaos strategy."""

    _event = "OnFaultInjected"

    __slots__ = ("_fault", "_generator")

    def __init__(self, options: ChaosFaultStrategyOptions, context: StrategyBuildContext) -> None:
        super().__init__(options, context, options.on_fault_injected)
        self._fault = options.fault
        self._generator = options.fault_generator

    def _inject(self, context: ResilienceContext) -> Steps:
        """Raise a fault (none if the generator gives None)."""
        generator = self._generator
        if generator is None:
            fault: Exception | None = fresh_fault(self._fault)  # type: ignore[arg-type] # validated: one of two
        else:
            generated = yield generator, FaultGeneratorArguments(context)
            fault = _checked(generated, Exception, "fault_generator", "an Exception instance, or None for no fault")
        if fault is not None:
            yield from self._injected(context, OnFaultInjectedArguments(context, fault), Err(fault))
            raise fault
        yield None, None


def _generated_latency(value: object, default: float) -> float:
    return generated_seconds(value, default, "latency_generator", "seconds (int, float or timedelta), or None")


class ChaosLatencyStrategy(ChaosStrategyBase):
    """The built latency chaos strategy."""

    _event = "OnLatencyInjected"

    __slots__ = ("_generator", "_latency")

    def __init__(self, options: ChaosLatencyStrategyOptions, context: StrategyBuildContext) -> None:
        super().__init__(options, context, options.on_latency_injected)
        self._latency = to_seconds(options.latency)
        self._generator = options.latency_generator
        if self._generator is None and self._latency <= 0:
            self.traits = StrategyTraits(inert=True, hands_on_context=True)  # a latency of 0 never injects

    def _inject(self, context: ResilienceContext) -> Steps:
        """Wait (not if the latency is zero or less), then call."""
        latency = self._latency
        if self._generator is not None:
            latency = _generated_latency((yield self._generator, LatencyGeneratorArguments(context)), latency)
        if latency > 0:
            yield from self._injected(context, OnLatencyInjectedArguments(context, latency))
            yield None, latency
        yield None, None

    def __repr__(self) -> str:
        return f"<ChaosLatencyStrategy rate={self._rate!r} latency={self._latency!r}>"


class ChaosOutcomeStrategy(ChaosStrategyBase):
    """The built outcome chaos strategy."""

    _event = "OnOutcomeInjected"

    __slots__ = ("_generator", "_outcome")

    def __init__(self, options: ChaosOutcomeStrategyOptions, context: StrategyBuildContext) -> None:
        super().__init__(options, context, options.on_outcome_injected)
        self._outcome = options.outcome
        self._generator = options.outcome_generator

    def _inject(self, context: ResilienceContext) -> Steps:
        """Return or raise an outcome instead of calling (none if the generator gives None)."""
        generator = self._generator
        outcome = self._outcome
        if generator is not None:
            generated = yield generator, OutcomeGeneratorArguments(context)
            expected = "Ok(value), Err(exception), or None for no injection"
            outcome = _checked(generated, Outcome, "outcome_generator", expected)
        elif isinstance(outcome, Err):
            outcome = Err(fresh_fault(outcome.error))  # each injection raises its own copy
        if outcome is not None:
            yield from self._injected(context, OnOutcomeInjectedArguments(context, outcome), outcome)
        yield None, outcome


class ChaosBehaviorStrategy(ChaosStrategyBase):
    """The built behavior chaos strategy."""

    _event = "OnBehaviorInjected"

    __slots__ = ("_behavior",)

    def __init__(self, options: ChaosBehaviorStrategyOptions, context: StrategyBuildContext) -> None:
        super().__init__(options, context, options.on_behavior_injected)
        self._behavior = options.behavior

    def _inject(self, context: ResilienceContext) -> Steps:
        """Run the behavior, then call."""
        yield from self._injected(context, OnBehaviorInjectedArguments(context))
        yield self._behavior, BehaviorGeneratorArguments(context)
        yield None, None
