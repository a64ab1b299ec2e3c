"""The public Strategy protocol, proven with the tests' own strategies (sync and async alike)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import pytest

from resilience import PipelineBuilder, ResilienceContext, ResiliencePipeline, ResiliencePropertyKey, get_context
from resilience.strategies import Strategy, StrategyBuildContext, StrategyOptions

T = TypeVar("T")
TRAIL = ResiliencePropertyKey[tuple[str, ...]]("trail")


@dataclass
class Recorder:
    """Records its name on the way in and out; marks the context it passes inwards."""

    name: str
    log: list[str]

    def execute(self, callback: Callable[[ResilienceContext], T], context: ResilienceContext, /) -> T:
        self.log.append(f"enter {self.name}")
        inner = context.derive()
        inner.properties.set(TRAIL, (*context.properties.get(TRAIL, ()), self.name))
        try:
            return callback(inner)
        finally:
            self.log.append(f"exit {self.name}")

    async def execute_async(
        self, callback: Callable[[ResilienceContext], Awaitable[T]], context: ResilienceContext, /
    ) -> T:
        self.log.append(f"enter {self.name}")
        inner = context.derive()
        inner.properties.set(TRAIL, (*context.properties.get(TRAIL, ()), self.name))
        try:
            return await callback(inner)
        finally:
            self.log.append(f"exit {self.name}")


class ShortCircuit:
    """Returns a fixed value without calling the inner pipeline."""

    def __init__(self, value: object) -> None:
        self.value = value

    def execute(self, callback: Callable[[ResilienceContext], T], context: ResilienceContext, /) -> T:
        return self.value  # type: ignore[return-value]

    async def execute_async(
        self, callback: Callable[[ResilienceContext], Awaitable[T]], context: ResilienceContext, /
    ) -> T:
        return self.value  # type: ignore[return-value]


class RetryOnce:
    """Calls the inner pipeline again, with a new attempt number, after a ValueError."""

    def execute(self, callback: Callable[[ResilienceContext], T], context: ResilienceContext, /) -> T:
        try:
            return callback(context.derive(attempt=0))
        except ValueError:
            return callback(context.derive(attempt=1))

    async def execute_async(
        self, callback: Callable[[ResilienceContext], Awaitable[T]], context: ResilienceContext, /
    ) -> T:
        try:
            return await callback(context.derive(attempt=0))
        except ValueError:
            return await callback(context.derive(attempt=1))


@dataclass(frozen=True)
class RecorderOptions:
    """Options that validate and create a Recorder: the StrategyOptions protocol."""

    log: list[str] = field(compare=False)
    name: str = "Recorder"
    depth: int = 0
    seen: list[StrategyBuildContext] = field(default_factory=list, compare=False)

    def validate(self, context: StrategyBuildContext, /) -> Iterable[str]:
        self.seen.append(context)
        if self.depth < 0:
            yield f"depth: must be >= 0, got {self.depth}"

    def create(self, context: StrategyBuildContext, /) -> Strategy:
        return Recorder(self.name, self.log)


def flaky(calls: list[int]) -> Callable[[], str]:
    def body() -> str:
        context = get_context()
        assert context is not None
        calls.append(context.attempt)
        if len(calls) == 1:
            raise ValueError("first call fails")
        return "ok"

    return body


def aflaky(calls: list[int]) -> Callable[[], Awaitable[str]]:
    body = flaky(calls)

    async def run() -> str:
        await asyncio.sleep(0)
        return body()

    return run


def build(*strategies: Any) -> ResiliencePipeline:
    builder = PipelineBuilder(name="custom")
    for strategy in strategies:
        builder.add(strategy)
    return builder.build()


def test_our_strategies_satisfy_the_protocols() -> None:
    """The tests' strategies are Strategy instances; their options are StrategyOptions."""
    assert isinstance(Recorder("r", []), Strategy)
    assert isinstance(RecorderOptions([]), StrategyOptions)
    assert not isinstance(object(), Strategy)


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_the_first_strategy_added_is_the_outermost(mode: str) -> None:
    """Strategies run outermost-first and unwind in reverse, in both modes."""
    log: list[str] = []
    pipeline = build(RecorderOptions(log, name="outer"), Recorder("middle", log), RecorderOptions(log, name="inner"))

    def body() -> tuple[str, ...]:
        log.append("call")
        context = get_context()
        assert context is not None
        return context.properties[TRAIL]

    async def abody() -> tuple[str, ...]:
        return body()

    trail = pipeline.execute(body) if mode == "sync" else asyncio.run(pipeline.execute_async(abody))
    assert trail == ("outer", "middle", "inner")
    assert log == ["enter outer", "enter middle", "enter inner", "call", "exit inner", "exit middle", "exit outer"]


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_strategy_can_short_circuit(mode: str) -> None:
    """A strategy that does not call inwards keeps the callable (and inner strategies) from running."""
    log: list[str] = []
    pipeline = build(Recorder("outer", log), ShortCircuit("cached"), Recorder("never", log))

    def body() -> str:
        log.append("call")
        return "fresh"

    async def abody() -> str:
        return body()

    result = pipeline.execute(body) if mode == "sync" else asyncio.run(pipeline.execute_async(abody))
    assert result == "cached"
    assert log == ["enter outer", "exit outer"]


def test_a_strategy_can_retry_the_inner_call_sync() -> None:
    """A strategy may call the inner pipeline again, with its own attempt numbers."""
    calls: list[int] = []
    assert build(RetryOnce()).execute(flaky(calls)) == "ok"
    assert calls == [0, 1]


async def test_a_strategy_can_retry_the_inner_call_async() -> None:
    """The async hook retries the same way."""
    calls: list[int] = []
    assert await build(RetryOnce()).execute_async(aflaky(calls)) == "ok"
    assert calls == [0, 1]


def test_strategies_see_the_context_and_build_context() -> None:
    """Options get the pipeline's identity, clock and a telemetry source named after them."""
    options = RecorderOptions([], name="seer")
    pipeline = PipelineBuilder(name="p", instance_name="i").add(options).build()
    built = options.seen[-1]
    assert (built.pipeline_name, built.pipeline_instance) == ("p", "i")
    assert built.time_provider is pipeline.time_provider
    assert built.telemetry.strategy_name == "seer"
    assert built.telemetry.pipeline_name == "p"


def test_options_validation_reaches_build() -> None:
    """A custom strategy's problems are reported by build(), prefixed with its name."""
    from resilience import ValidationError

    with pytest.raises(ValidationError) as info:
        build(RecorderOptions([], name="Mine", depth=-1))
    assert info.value.problems == ["Mine.depth: must be >= 0, got -1"]
