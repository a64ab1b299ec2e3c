import asyncio
import functools
import inspect
from typing import Any

import pytest

from resilience import (
    Err,
    Ok,
    PipelineBuilder,
    ResiliencePipeline,
    ResiliencePipelineBuilder,
    ValidationError,
    get_context,
)


@pytest.fixture
def pipeline() -> ResiliencePipeline:
    return ResiliencePipelineBuilder(name="test").build()


def add(a: int, b: int = 0, *, scale: int = 1) -> int:
    return (a + b) * scale


async def aadd(a: int, b: int = 0, *, scale: int = 1) -> int:
    await asyncio.sleep(0)
    return (a + b) * scale


def test_execute_passes_every_argument_unchanged(pipeline: ResiliencePipeline) -> None:
    """Positional and keyword arguments reach the callable; nothing is reserved."""
    assert pipeline.execute(add, 1, 2, scale=3) == 9

    def takes_reserved(fn: int, context: int, args: int) -> int:
        return fn + context + args

    assert pipeline.execute(takes_reserved, fn=1, context=2, args=3) == 6


def test_execute_raises_the_callables_exception_unchanged(pipeline: ResiliencePipeline) -> None:
    """An exception leaves execute() as it was raised."""
    error = ValueError("boom")

    def fail() -> None:
        raise error

    with pytest.raises(ValueError) as info:
        pipeline.execute(fail)
    assert info.value is error


def test_settle_returns_ok_or_err(pipeline: ResiliencePipeline) -> None:
    """settle() turns results into Ok and exceptions into Err."""
    assert pipeline.settle(add, 2) == Ok(2)
    outcome = pipeline.settle(lambda: 1 / 0)
    assert isinstance(outcome, Err)
    assert isinstance(outcome.error, ZeroDivisionError)
    text = outcome.match(ok=lambda v: f"ok {v}", err=lambda e: f"failed {type(e).__name__}")
    assert text == "failed ZeroDivisionError"


@pytest.mark.parametrize("exc_type", [KeyboardInterrupt, SystemExit, asyncio.CancelledError, GeneratorExit])
def test_settle_lets_base_exceptions_through(pipeline: ResiliencePipeline, exc_type: type[BaseException]) -> None:
    """settle() catches Exception only."""

    def interrupt() -> None:
        raise exc_type

    with pytest.raises(exc_type):
        pipeline.settle(interrupt)


async def test_execute_async_and_settle_async(pipeline: ResiliencePipeline) -> None:
    """The async twins await the callable and behave like their sync twins."""
    assert await pipeline.execute_async(aadd, 1, 2, scale=2) == 6
    assert await pipeline.settle_async(aadd, 1) == Ok(1)

    async def fail() -> None:
        raise KeyError("k")

    outcome = await pipeline.settle_async(fail)
    assert isinstance(outcome, Err)
    assert isinstance(outcome.error, KeyError)
    with pytest.raises(KeyError):
        await pipeline.execute_async(fail)


async def test_settle_async_lets_cancellation_through(pipeline: ResiliencePipeline) -> None:
    """settle_async() never turns a cancellation into an Err."""

    async def forever() -> None:
        await asyncio.sleep(10)

    task = asyncio.create_task(pipeline.settle_async(forever))
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_settle_async_lets_keyboard_interrupt_through(pipeline: ResiliencePipeline) -> None:
    """settle_async() catches Exception only."""

    async def interrupt() -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        await pipeline.settle_async(interrupt)


def test_a_sync_execution_refuses_an_awaitable(pipeline: ResiliencePipeline) -> None:
    """execute(fn) where fn returns an awaitable raises ValidationError and closes it."""
    coroutine = aadd(1)
    with pytest.raises(ValidationError, match="execute_async"):
        pipeline.execute(lambda: coroutine)
    assert inspect.getcoroutinestate(coroutine) == inspect.CORO_CLOSED
    outcome = pipeline.settle(aadd, 1)
    assert isinstance(outcome, Err)
    assert isinstance(outcome.error, ValidationError)


def test_a_sync_execution_refuses_any_awaitable_type(pipeline: ResiliencePipeline) -> None:
    """Awaitables that are not coroutines (futures, custom __await__) are refused too."""

    class Custom:
        def __await__(self) -> Any:
            yield from ()

    with pytest.raises(ValidationError):
        pipeline.execute(Custom)


async def test_an_async_execution_refuses_a_plain_value(pipeline: ResiliencePipeline) -> None:
    """execute_async(fn) where fn does not return an awaitable raises ValidationError."""
    with pytest.raises(ValidationError, match="execute/settle"):
        await pipeline.execute_async(add, 1)  # type: ignore[arg-type]


def test_the_callable_sees_its_execution_context(pipeline: ResiliencePipeline) -> None:
    """get_context() inside the callable is the execution's context, and None again after."""
    seen = pipeline.execute(get_context)
    assert seen is not None
    assert get_context() is None


def test_the_decorator_keeps_metadata_and_signature(pipeline: ResiliencePipeline) -> None:
    """@pipeline keeps name, docstring and signature of a sync function."""

    @pipeline
    def charge(order_id: str, *, amount: int = 1) -> str:
        """Charge an order."""
        return f"{order_id}:{amount}"

    assert charge("o1", amount=5) == "o1:5"
    assert charge.__name__ == "charge"
    assert charge.__doc__ == "Charge an order."
    assert str(inspect.signature(charge)) == "(order_id: str, *, amount: int = 1) -> str"
    assert not inspect.iscoroutinefunction(charge)


async def test_the_decorator_turns_async_callables_into_coroutine_functions(pipeline: ResiliencePipeline) -> None:
    """Async functions, partials of them and objects with async __call__ become coroutine functions."""

    class AsyncCallable:
        async def __call__(self, x: int) -> int:
            return x * 3

    decorated = [pipeline(aadd), pipeline(functools.partial(aadd, 1)), pipeline(AsyncCallable())]
    for fn in decorated:
        assert inspect.iscoroutinefunction(fn)
    assert await decorated[0](2) == 2
    assert await decorated[1](2) == 3
    assert await decorated[2](2) == 6
    assert decorated[0].__name__ == "aadd"


def test_the_decorator_refuses_generator_functions(pipeline: ResiliencePipeline) -> None:
    """Generator functions (sync and async) are refused with a clear message."""

    def gen() -> Any:
        yield 1

    async def agen() -> Any:
        yield 1

    for fn in (gen, agen):
        with pytest.raises(ValidationError, match="generator function"):
            pipeline(fn)


async def test_one_pipeline_serves_sync_and_async_callers(pipeline: ResiliencePipeline) -> None:
    """The same pipeline object runs sync calls from threads while async calls run."""
    results = await asyncio.gather(
        asyncio.to_thread(pipeline.execute, add, 1, 1),
        pipeline.execute_async(aadd, 2, 2),
    )
    assert results == [2, 4]


def test_a_pipeline_reports_its_strategies_and_name() -> None:
    """The pipeline knows its name, instance, clock and (empty) strategies."""
    pipeline = PipelineBuilder(name="n", instance_name="i").build()
    assert (pipeline.name, pipeline.instance_name, pipeline.strategies) == ("n", "i", ())
    assert "name='n'" in repr(pipeline)


def test_results_of_unusual_types_are_not_mistaken_for_awaitables(pipeline: ResiliencePipeline) -> None:
    """Plain objects of any class pass through the awaitable check, repeatedly."""

    class Plain:
        pass

    for _ in range(3):
        assert isinstance(pipeline.execute(Plain), Plain)


def test_no_callable_starts_under_an_aborted_signal() -> None:
    """An execution whose caller's signal already aborted never starts the callable (any pipeline)."""
    from resilience import Signal, use_context

    signal = Signal()
    signal.abort(KeyError("caller gave up"))
    calls: list[int] = []
    pipelines = [
        ResiliencePipelineBuilder().build(),
        ResiliencePipelineBuilder().add_circuit_breaker().build(),
    ]
    for pipeline in pipelines:
        with use_context(signal=signal):
            with pytest.raises(KeyError):
                pipeline.execute(calls.append, 1)

            async def run(p: ResiliencePipeline = pipeline) -> None:
                async def body() -> None:
                    calls.append(2)

                await p.execute_async(body)

            with pytest.raises(KeyError):
                asyncio.run(run())
    assert calls == []


async def test_a_sync_execution_cancels_a_future_it_refuses(pipeline: ResiliencePipeline) -> None:
    """A future returned to a sync execution is cancelled, not left pending."""
    future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    with pytest.raises(ValidationError):
        pipeline.execute(lambda: future)
    assert future.cancelled()
