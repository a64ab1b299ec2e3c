"""What the four chaos strategies share: the injection decision, its options, and both shells.

One source decides whether an execution gets chaos (Polly's `ChaosStrategy.ShouldInjectAsync`):

1. `enabled_generator(args)` if given, else `enabled` (the generator wins);
2. then `injection_rate_generator(args)` if given, else `injection_rate`, clamped to 0..1;
3. then one draw from the time provider's `random()`: inject when the draw is below the rate.

Before each generator runs, the execution's signal is checked (Polly): an execution whose
signal aborted raises its reason and no generator runs for it.

The draw comes from the provider, so `FakeTimeProvider(seed=...)` repeats the same injections.
The sync and async twins differ only in awaiting a generator's awaitable.
"""

from __future__ import annotations

import copy
import inspect
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from resilience._outcome import Outcome
from resilience._validation import Problems
from resilience.exceptions import ValidationError
from resilience.strategies._base import StrategyTraits
from resilience.strategies._common import called_back, run_steps, run_steps_async, wait, wait_async
from resilience.telemetry._event import Severity

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from resilience._context import ResilienceContext
    from resilience._time import TimeProvider
    from resilience.strategies._base import StrategyBuildContext
    from resilience.strategies._common import Steps
    from resilience.telemetry._source import TelemetrySource

__all__ = [
    "ChaosStrategyBase",
    "EnabledGeneratorArguments",
    "InjectionRateGeneratorArguments",
    "chaos_problems",
    "check_fault",
    "fresh_fault",
]


@dataclass(frozen=True, slots=True)
class EnabledGeneratorArguments:
    """What `enabled_generator` receives before each execution of a chaos strategy."""

    context: ResilienceContext


@dataclass(frozen=True, slots=True)
class InjectionRateGeneratorArguments:
    """What `injection_rate_generator` receives before each execution of a chaos strategy."""

    context: ResilienceContext


def chaos_problems(options: Any) -> Problems:
    """The problems of the options every chaos strategy has (`injection_rate`, `enabled`, ...)."""
    problems = Problems()
    rate: object = options.injection_rate
    if isinstance(rate, bool) or not isinstance(rate, int | float):
        problems.add("injection_rate", f"must be a number from 0 to 1, got {rate!r}")
    elif not 0 <= rate <= 1:  # NaN fails this too
        problems.add("injection_rate", f"must be from 0 to 1, got {rate!r}")
    problems.callable("injection_rate_generator", options.injection_rate_generator)
    problems.boolean("enabled", options.enabled)
    problems.callable("enabled_generator", options.enabled_generator)
    problems.name("name", options.name)
    return problems


def check_fault(problems: Problems, option: str, fault: object) -> None:
    """Record what is wrong with an exception to inject (an `Exception` instance or subclass)."""
    if isinstance(fault, type) and issubclass(fault, Exception):
        return
    if not isinstance(fault, Exception):
        problems.add(option, f"must be an Exception instance or subclass, got {fault!r}")
        return
    try:
        copied = copy.copy(fault)
    except Exception as exc:  # noqa: BLE001 - any failure means "cannot be copied"
        problems.add(option, f"cannot be copied ({exc!r}): pass its class or use a generator")
        return
    if type(copied) is not type(fault):  # pragma: no cover - a __reduce__ that lies
        problems.add(option, f"copies as {type(copied).__name__}: pass its class or use a generator")


def fresh_fault(fault: Exception | type[Exception]) -> Exception:
    """A new exception to raise: each injection gets its own object (and so its own traceback)."""
    return fault() if isinstance(fault, type) else copy.copy(fault)


def coerce_rate(value: object) -> float:
    """A generated injection rate, clamped to 0..1 (Polly); not a number is misuse."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        msg = f"injection_rate_generator returned {value!r}: return a number from 0 to 1"
        raise ValidationError(msg)
    return 0.0 if math.isnan(value) else min(max(float(value), 0.0), 1.0)


T = TypeVar("T")


class ChaosStrategyBase:
    """The built chaos strategies' common part: the decision, the event, the user callback.

    Its traits say `inert` when the options can never inject: `build()` then leaves the
    strategy out, so switched-off chaos costs nothing on the success path.
    """

    _event: ClassVar[str]
    """The event each injection emits (one per kind)."""

    __slots__ = (
        "_draw",
        "_enabled",
        "_enabled_generator",
        "_on_injected",
        "_rate",
        "_rate_generator",
        "_telemetry",
        "_time",
        "traits",
    )

    def __init__(
        self, options: Any, context: StrategyBuildContext, on_injected: Callable[[Any], object] | None
    ) -> None:
        self._enabled: bool = options.enabled
        self._enabled_generator: Callable[[EnabledGeneratorArguments], object] | None = options.enabled_generator
        self._rate = float(options.injection_rate)
        self._rate_generator: Callable[[InjectionRateGeneratorArguments], object] | None = (
            options.injection_rate_generator
        )
        self._draw = context.time_provider.random().random
        self._telemetry: TelemetrySource = context.telemetry
        self._time: TimeProvider = context.time_provider
        self._on_injected = on_injected
        # No execution can ever be injected when switched off or at a rate of 0 (no generator).
        never = self._enabled_generator is None and not self._enabled
        never = never or (self._rate_generator is None and self._rate <= 0)
        self.traits = StrategyTraits(inert=never, hands_on_context=True)

    def _decide(self, context: ResilienceContext) -> bool:
        """Whether this (sync) execution gets chaos."""
        generator = self._enabled_generator
        if generator is not None:
            context.raise_if_aborted()  # no generator runs for an execution that is over
            on = generator(EnabledGeneratorArguments(context))
            if on is not True and (on is False or not called_back(generator, on)):
                return False
        elif not self._enabled:
            return False
        rate_generator = self._rate_generator
        if rate_generator is None:
            return self._draw() < self._rate
        context.raise_if_aborted()
        rate = rate_generator(InjectionRateGeneratorArguments(context))
        if type(rate) is not float:
            rate = called_back(rate_generator, rate)
        return self._draw() < coerce_rate(rate)

    async def _decide_async(self, context: ResilienceContext) -> bool:
        """Whether this (async) execution gets chaos; a generator's awaitable is awaited."""
        generator = self._enabled_generator
        if generator is not None:
            context.raise_if_aborted()
            on = generator(EnabledGeneratorArguments(context))
            if on is not True and (on is False or not (await on if inspect.isawaitable(on) else on)):
                return False
        elif not self._enabled:
            return False
        rate_generator = self._rate_generator
        if rate_generator is None:
            return self._draw() < self._rate
        context.raise_if_aborted()
        rate = rate_generator(InjectionRateGeneratorArguments(context))
        if type(rate) is not float and inspect.isawaitable(rate):
            rate = await rate
        return self._draw() < coerce_rate(rate)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} rate={self._rate!r}>"

    def _inject(self, context: ResilienceContext) -> Steps:
        """This kind's injection, for both shells, once the decision says inject.

        Yields `(callback, arguments)` for each user callback (the shell calls or awaits it and
        sends back its result), then `(None, step)`: None calls the inner pipeline, an
        `Outcome` is returned or raised instead of calling it, a number of seconds is waited
        (on the time provider, ending at once with the signal's reason if it aborts) before
        calling it. A fault is raised from the steps themselves.
        """
        raise NotImplementedError  # pragma: no cover - each kind has its own

    def _injected(self, context: ResilienceContext, arguments: object, outcome: Outcome[Any] | None = None) -> Steps:
        """Emit the injection's event (Information), then yield the user callback."""
        context.raise_if_aborted()  # nothing is injected into an execution already abandoned
        self._telemetry.emit(
            self._event, Severity.INFORMATION, operation_key=context.operation_key, outcome=outcome, arguments=arguments
        )
        if self._on_injected is not None:
            yield self._on_injected, arguments

    def execute(self, callback: Callable[[ResilienceContext], T], context: ResilienceContext, /) -> T:
        """Inject (see `_inject`) or call `callback` (sync)."""
        if self._decide(context):
            step = run_steps(self._inject(context))
            if isinstance(step, Outcome):
                return step.unwrap()  # type: ignore[no-any-return] # the injected value stands in for T
            if step is not None and wait(self._time, step, context.signal):
                context.raise_if_aborted()
        return callback(context)

    async def execute_async(
        self, callback: Callable[[ResilienceContext], Awaitable[T]], context: ResilienceContext, /
    ) -> T:
        """Inject (see `_inject`) or await `callback` (async)."""
        if await self._decide_async(context):
            step = await run_steps_async(self._inject(context))
            if isinstance(step, Outcome):
                return step.unwrap()  # type: ignore[no-any-return] # the injected value stands in for T
            if step is not None and await wait_async(self._time, step, context.signal):
                context.raise_if_aborted()
        return await callback(context)
