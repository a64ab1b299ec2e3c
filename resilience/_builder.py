"""`PipelineBuilder` and `ResiliencePipelineBuilder`: compose strategies, validate at `build()`."""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING, Concatenate, Never, NoReturn, ParamSpec, Self, TypeVar

from resilience._pipeline import ResiliencePipeline
from resilience._time import SYSTEM_TIME, TimeProvider
from resilience._validation import Problems
from resilience.exceptions import ValidationError
from resilience.strategies import (
    chaos_behavior_strategy,
    chaos_fault_strategy,
    chaos_latency_strategy,
    chaos_outcome_strategy,
    circuit_breaker_strategy,
    concurrency_limiter_strategy,
    fallback_strategy,
    hedging_strategy,
    lock_strategy,
    rate_limiter_strategy,
    retry_strategy,
    timeout_strategy,
)
from resilience.strategies._base import Strategy, StrategyBuildContext, StrategyOptions, traits_of
from resilience.telemetry._options import TelemetryOptions
from resilience.telemetry._source import TelemetrySource

if TYPE_CHECKING:
    from collections.abc import Callable

P = ParamSpec("P")
B = TypeVar("B", bound="PipelineBuilder")

__all__ = ["PipelineBuilder", "ResiliencePipelineBuilder"]


class PipelineBuilder:
    """Collects strategies, first added = outermost, and builds pipelines from them.

    Nothing is validated or created before `build()`, which may be called any number of
    times: each call validates every option of every strategy (raising one `ValidationError`
    listing every problem) and creates fresh strategy state.
    """

    def __init__(
        self,
        *,
        name: str | None = None,
        instance_name: str | None = None,
        time_provider: TimeProvider | None = None,
        telemetry: TelemetryOptions | None = None,
    ) -> None:
        self._name = name
        self._instance_name = instance_name
        self._time_provider = time_provider
        self._telemetry = telemetry
        self._strategies: list[StrategyOptions | Strategy] = []

    def __call__(self, *_args: Never, **_kwargs: Never) -> NoReturn:
        """A builder is not a pipeline: `@builder` or `builder(fn)` asks for `.build()`."""
        msg = f"{type(self).__name__} is not a pipeline: did you forget .build()? (pipeline = builder.build())"
        raise ValidationError(msg)

    def add(self, strategy: StrategyOptions | Strategy, /) -> Self:
        """Append a strategy (its options, e.g. `retry_strategy(...)`, or a ready `Strategy`)."""
        self._strategies.append(strategy)
        return self

    def build(self) -> ResiliencePipeline:
        """Validate everything and return a new pipeline with fresh strategy state."""
        problems = Problems("Pipeline.")
        problems.name("name", self._name, allow_none=True)
        problems.name("instance_name", self._instance_name, allow_none=True)
        time_provider: object = self._time_provider or SYSTEM_TIME
        if not isinstance(time_provider, TimeProvider):
            problems.add("time_provider", f"must implement TimeProvider, got {time_provider!r}")
            time_provider = SYSTEM_TIME
        telemetry: object = self._telemetry
        if telemetry is not None and not isinstance(telemetry, TelemetryOptions):
            problems.add("telemetry", f"must be a TelemetryOptions, got {telemetry!r}")
            telemetry = None
        source = TelemetrySource(telemetry, pipeline_name=self._name, pipeline_instance=self._instance_name)

        closers: list[Callable[[], object]] = []
        planned: list[Strategy | tuple[StrategyOptions, StrategyBuildContext]] = []
        candidates: list[object] = list(self._strategies)  # checked: callers may ignore the types
        for position, item in enumerate(candidates):
            if isinstance(item, StrategyOptions):
                context = StrategyBuildContext(
                    pipeline_name=self._name,
                    pipeline_instance=self._instance_name,
                    time_provider=time_provider,
                    telemetry=source.for_strategy(item.name),
                    closers=closers,
                )
                problems.items.extend(f"{item.name}.{problem}" for problem in item.validate(context))
                planned.append((item, context))
            elif isinstance(item, Strategy):
                planned.append(item)
            else:
                problems.add(f"strategies[{position}]", f"must be strategy options or a Strategy, got {item!r}")
        if problems.items:
            raise ValidationError(problems.items)
        strategies = [entry[0].create(entry[1]) if isinstance(entry, tuple) else entry for entry in planned]
        # A strategy that can never act (switched-off chaos) is left out: it then costs nothing.
        strategies = [strategy for strategy in strategies if not traits_of(strategy).inert]
        return ResiliencePipeline(
            strategies,
            name=self._name,
            instance_name=self._instance_name,
            time_provider=time_provider,
            telemetry=source,
            closers=closers,
        )


def _shortcut(factory: Callable[P, StrategyOptions]) -> Callable[Concatenate[B, P], B]:
    """`add_x(...)`, derived from the factory `x_strategy(...)`: `.add(x_strategy(...))`.

    It takes the factory's parameters (for the type checkers, `help()` and `inspect` alike)
    and its documentation, so an option is declared in one place.
    """

    def add(self: B, /, *args: P.args, **kwargs: P.kwargs) -> B:
        return self.add(factory(*args, **kwargs))

    name = factory.__name__.removesuffix("_strategy")
    add.__name__ = f"add_{name}"
    add.__qualname__ = f"ResiliencePipelineBuilder.add_{name}"
    add.__doc__ = f"`.add({factory.__name__}(...))`: {factory.__doc__}"
    signature = inspect.signature(factory)
    self_parameter = inspect.Parameter("self", inspect.Parameter.POSITIONAL_ONLY)
    add.__signature__ = signature.replace(  # type: ignore[attr-defined]
        parameters=[self_parameter, *signature.parameters.values()], return_annotation="Self"
    )
    return add


class ResiliencePipelineBuilder(PipelineBuilder):
    """`PipelineBuilder` with Polly-style shortcuts: `add_retry`, `add_timeout`, ... .

    Each shortcut is exactly `.add(x_strategy(...))`, with the factory's signature and
    documentation.
    """

    add_retry = _shortcut(retry_strategy)
    add_timeout = _shortcut(timeout_strategy)
    add_circuit_breaker = _shortcut(circuit_breaker_strategy)
    add_lock = _shortcut(lock_strategy)
    add_rate_limiter = _shortcut(rate_limiter_strategy)
    add_concurrency_limiter = _shortcut(concurrency_limiter_strategy)
    add_fallback = _shortcut(fallback_strategy)
    add_hedging = _shortcut(hedging_strategy)
    add_chaos_fault = _shortcut(chaos_fault_strategy)
    add_chaos_latency = _shortcut(chaos_latency_strategy)
    add_chaos_outcome = _shortcut(chaos_outcome_strategy)
    add_chaos_behavior = _shortcut(chaos_behavior_strategy)
