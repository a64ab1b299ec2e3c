"""The chain composed once at build(): the last step always calls its own execution's callable.

Regression tests for a review of the change: a custom strategy may hand the inner part a
context made from another execution's (which carries that execution's call).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

import pytest

from resilience import PipelineBuilder, ResilienceContext, ResiliencePipeline, get_context, use_context
from resilience._lease._workers import CALLBACKS
from resilience._runtime._timers import TIMER_THREAD
from resilience._time import SystemTimeProvider, TimerHandle
from resilience.strategies import retry_strategy, timeout_strategy

T = TypeVar("T")


class KeyOverride:
    """Hands on the ambient context (an enclosing execution's) with another operation key."""

    def execute(self, callback: Callable[[ResilienceContext], T], context: ResilienceContext, /) -> T:
        with use_context(get_context() or context, operation_key="tenant-1") as made:
            return callback(made)

    async def execute_async(
        self, callback: Callable[[ResilienceContext], Awaitable[T]], context: ResilienceContext, /
    ) -> T:
        with use_context(get_context() or context, operation_key="tenant-1") as made:
            return await callback(made)


class PassThrough:
    def execute(self, callback: Callable[[ResilienceContext], T], context: ResilienceContext, /) -> T:
        return callback(context)

    async def execute_async(
        self, callback: Callable[[ResilienceContext], Awaitable[T]], context: ResilienceContext, /
    ) -> T:
        return await callback(context)


def test_a_context_made_from_an_enclosing_execution_calls_this_executions_callable() -> None:
    """An inner pipeline's strategy hands on a context derived from the outer execution's: the inner callable runs."""
    inner = PipelineBuilder().add(KeyOverride()).build()
    outer = PipelineBuilder().add(retry_strategy(max_retries=1, delay=0)).build()
    calls: list[str] = []

    def inner_fn() -> str:
        calls.append("inner")
        context = get_context()
        assert context is not None
        return f"inner {context.operation_key}"

    def outer_fn() -> str:
        calls.append("outer")
        return inner.execute(inner_fn)

    assert outer.execute(outer_fn) == "inner tenant-1"
    assert calls == ["outer", "inner"]

    async def inner_async() -> str:
        return inner_fn()

    async def outer_async() -> str:
        calls.append("outer")
        return await inner.execute_async(inner_async)

    calls.clear()
    assert asyncio.run(outer.execute_async(outer_async)) == "inner tenant-1"
    assert calls == ["outer", "inner"]


class ThroughOther:
    """Runs the rest of its chain inside another pipeline's execution, under that one's context."""

    def __init__(self, other: ResiliencePipeline) -> None:
        self.other = other

    def execute(self, callback: Callable[[ResilienceContext], T], context: ResilienceContext, /) -> T:
        return self.other.execute(lambda: callback(get_context() or context))

    async def execute_async(
        self, callback: Callable[[ResilienceContext], Awaitable[T]], context: ResilienceContext, /
    ) -> T:
        async def run() -> T:
            return await callback(get_context() or context)

        return await self.other.execute_async(run)


@pytest.mark.parametrize("foreign", [False, True], ids=["built-in other", "custom other"])
def test_a_strategy_that_runs_the_rest_through_another_pipeline_calls_its_own_callable(foreign: bool) -> None:
    """`other.execute(lambda: callback(get_context()))`: the context is the other pipeline's; the callable is ours."""
    builder = PipelineBuilder()
    if foreign:
        builder.add(PassThrough())
    other = builder.add(timeout_strategy(5.0)).build()
    pipeline = PipelineBuilder().add(ThroughOther(other)).build()
    calls: list[int] = []

    def fn() -> str:
        calls.append(1)
        return "ok"

    async def fn_async() -> str:
        return fn()

    assert pipeline.execute(fn) == "ok"
    assert asyncio.run(pipeline.execute_async(fn_async)) == "ok"
    assert calls == [1, 1]


def test_a_timeout_already_passed_when_the_callable_would_start_is_reported() -> None:
    """A deadline that passed before the callable starts still raises through `on_timeout` and the event."""
    seen: list[object] = []
    pipeline = PipelineBuilder().add(timeout_strategy(1e-9, on_timeout=seen.append)).build()
    ran: list[int] = []
    try:
        pipeline.execute(lambda: ran.append(1))
    except TimeoutError:
        pass
    else:  # pragma: no cover - the deadline passed long before
        raise AssertionError("the timeout did not fire")
    assert len(seen) == 1
    assert ran == []


class TimerThreadClock(SystemTimeProvider):
    """A system clock whose timers fire on the shared timer thread, even inside a loop."""

    def call_later(self, delay: float, callback: Callable[[], object]) -> TimerHandle:
        return TIMER_THREAD.call_later(delay, callback)


def test_an_async_timeout_cancels_at_once_while_the_callback_pool_is_busy() -> None:
    """The deadline's cancellation of the awaiting task never waits behind user callbacks."""
    pipeline = PipelineBuilder(time_provider=TimerThreadClock()).add(timeout_strategy(0.05)).build()

    async def slow() -> None:
        await asyncio.sleep(5)

    async def main() -> float:
        for _ in range(16):  # the callback pool's threads, all busy with slow user callbacks
            CALLBACKS.submit(lambda: time.sleep(1.0))
        started = time.monotonic()
        try:
            await pipeline.execute_async(slow)
        except TimeoutError:
            return time.monotonic() - started
        raise AssertionError("the timeout did not fire")  # pragma: no cover

    assert asyncio.run(main()) < 0.6


def test_a_pipeline_executed_inside_its_own_callable_calls_the_nested_callable() -> None:
    """Recursion through one pipeline whose strategy hands on the ambient context: each level calls its own callable."""
    pipeline = PipelineBuilder().add(KeyOverride()).build()
    seen: list[int] = []

    @pipeline
    def factorial(n: int) -> int:
        seen.append(n)
        return 1 if n <= 1 else n * factorial(n - 1)

    assert factorial(3) == 6
    assert seen == [3, 2, 1]
