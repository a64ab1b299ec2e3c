"""The fallback strategy: what is replaced, by what, what is reported, and what is never touched."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

import pytest

from resilience import (
    BrokenCircuitError,
    Err,
    LockNotAcquiredError,
    Ok,
    Outcome,
    PipelineBuilder,
    ResilienceContext,
    ResiliencePipeline,
    ResiliencePipelineBuilder,
    Signal,
    TimeoutRejectedError,
    ValidationError,
    get_context,
    use_context,
)
from resilience.stores import MemoryLockStore
from resilience.strategies import (
    CircuitBreakerStateProvider,
    CircuitState,
    FallbackArguments,
    FallbackStrategyOptions,
    OnFallbackArguments,
    fallback_strategy,
)
from resilience.telemetry import Severity, TelemetryEvent, TelemetryOptions
from tests.unit.modes import MODES, run

if TYPE_CHECKING:
    from collections.abc import Callable

    from resilience.testing import FakeTimeProvider


def fails(error: BaseException) -> Callable[[], Any]:
    def fn() -> Any:
        raise error

    return fn


class Recorder:
    """A fallback that records what it was given and returns a fixed value."""

    def __init__(self, value: object = "cached") -> None:
        self.value = value
        self.calls: list[FallbackArguments] = []
        self.ambient: list[ResilienceContext | None] = []

    def __call__(self, args: FallbackArguments) -> object:
        self.calls.append(args)
        self.ambient.append(get_context())
        return self.value


def build(
    fallback: Callable[[FallbackArguments], Any], events: list[TelemetryEvent] | None = None, **options: Any
) -> ResiliencePipeline:
    telemetry = TelemetryOptions(listeners=[events.append]) if events is not None else None
    return ResiliencePipelineBuilder(telemetry=telemetry).add_fallback(fallback, **options).build()


# -- what is replaced ---------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
async def test_handled_exception_is_replaced_by_the_fallback_value(mode: str) -> None:
    """A handled exception never leaves the pipeline: the fallback's value is returned."""
    error = ConnectionError("down")
    fallback = Recorder()
    assert await run(build(fallback), fails(error), mode) == "cached"
    [args] = fallback.calls
    assert isinstance(args.outcome, Err)
    assert args.outcome.error is error
    assert isinstance(args.context, ResilienceContext)


@pytest.mark.parametrize("mode", MODES)
async def test_success_is_returned_and_the_fallback_never_runs(mode: str) -> None:
    """No handled outcome, no fallback: the result passes through unchanged."""
    fallback = Recorder()
    assert await run(build(fallback), lambda: 41, mode) == 41
    assert fallback.calls == []


@pytest.mark.parametrize("mode", MODES)
async def test_unhandled_exception_propagates_unchanged(mode: str) -> None:
    """`handle=<type>` replaces only that type; anything else propagates as is."""
    error = KeyError("x")
    fallback = Recorder()
    with pytest.raises(KeyError) as caught:
        await run(build(fallback, handle=ConnectionError), fails(error), mode)
    assert caught.value is error
    assert fallback.calls == []


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(
    ("handle", "error", "replaced"),
    [
        ((KeyError, ConnectionError), ConnectionError(), True),
        ((KeyError, ConnectionError), TypeError(), False),
        (lambda outcome: isinstance(outcome.error, OSError), FileNotFoundError(), True),
        (lambda outcome: isinstance(outcome.error, OSError), ValueError(), False),
    ],
)
async def test_handle_by_tuple_and_predicate(mode: str, handle: Any, error: Exception, *, replaced: bool) -> None:
    """`handle` is a tuple of types or a predicate over the outcome, as in retry."""
    pipeline = build(Recorder(), handle=handle)
    if replaced:
        assert await run(pipeline, fails(error), mode) == "cached"
    else:
        with pytest.raises(type(error)):
            await run(pipeline, fails(error), mode)


@pytest.mark.parametrize("mode", MODES)
async def test_validation_error_is_not_handled_by_default(mode: str) -> None:
    """The default `handle` is every Exception except `ValidationError` (misuse must surface)."""
    fallback = Recorder()
    with pytest.raises(ValidationError):
        await run(build(fallback), fails(ValidationError("misuse")), mode)
    assert fallback.calls == []


@pytest.mark.parametrize("mode", MODES)
async def test_handle_result_replaces_matching_results(mode: str) -> None:
    """`handle_result` makes results replaceable; the fallback sees the `Ok` outcome."""
    fallback = Recorder("fresh")
    pipeline = build(fallback, handle_result=lambda value: value == 503)
    assert await run(pipeline, lambda: 503, mode) == "fresh"
    assert await run(pipeline, lambda: 200, mode) == 200
    [args] = fallback.calls
    assert args.outcome == Ok(503)


@pytest.mark.parametrize("mode", MODES)
async def test_predicate_sees_results_too(mode: str) -> None:
    """A `handle` predicate sees every outcome, results included (then `handle_result` is ignored)."""
    pipeline = build(Recorder("fresh"), handle=lambda outcome: outcome.value is None, handle_result=lambda _: False)
    assert await run(pipeline, lambda: None, mode) == "fresh"
    assert await run(pipeline, lambda: 1, mode) == 1


@pytest.mark.parametrize("mode", MODES)
async def test_base_exceptions_are_never_handled(mode: str) -> None:
    """A `BaseException` that is not an `Exception` passes through, even with a catch-all predicate."""

    class Stop(BaseException):
        pass

    fallback = Recorder()
    with pytest.raises(Stop):
        await run(build(fallback, handle=lambda _outcome: True), fails(Stop()), mode)
    assert fallback.calls == []


async def test_async_cancellation_passes_through() -> None:
    """Cancelling the caller's task is never replaced by a fallback value."""
    fallback = Recorder()
    pipeline = build(fallback, handle=lambda _outcome: True)
    started = asyncio.Event()

    async def slow() -> None:
        started.set()
        await asyncio.sleep(60)

    task = asyncio.ensure_future(pipeline.execute_async(slow))
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert fallback.calls == []


@pytest.mark.parametrize("mode", MODES)
async def test_no_fallback_once_the_callers_signal_aborted(mode: str) -> None:
    """The caller gave up: its abort, and what it caused, propagate instead of a substitute."""
    signal = Signal()
    fallback = Recorder()

    def abort_then_fail() -> None:
        signal.abort()
        raise ConnectionError

    with use_context(signal=signal), pytest.raises(ConnectionError):
        await run(build(fallback), abort_then_fail, mode)
    assert fallback.calls == []


# -- the fallback itself ------------------------------------------------------------------------


async def test_async_fallback_is_awaited() -> None:
    """In an async execution the fallback may be a coroutine function."""

    async def from_cache(args: FallbackArguments) -> str:
        await asyncio.sleep(0)
        return f"cached after {type(args.outcome.error).__name__}"

    async def down() -> str:
        raise ConnectionError

    assert await build(from_cache).execute_async(down) == "cached after ConnectionError"


def test_async_fallback_in_a_sync_execution_is_misuse() -> None:
    """A sync execution refuses a fallback that returns an awaitable (and closes it)."""

    async def from_cache(_args: FallbackArguments) -> str:
        return "never"

    with pytest.raises(ValidationError, match="returned an awaitable in a sync execution"):
        build(from_cache).execute(fails(ConnectionError()))


@pytest.mark.parametrize("mode", MODES)
async def test_an_exception_from_the_fallback_propagates_with_the_original_as_context(mode: str) -> None:
    """The fallback may raise: that exception leaves the pipeline, chained to the handled one."""
    original = ConnectionError("primary")
    replacement = LookupError("no cached copy either")

    def no_cache(_args: FallbackArguments) -> object:
        raise replacement

    with pytest.raises(LookupError) as caught:
        await run(build(no_cache), fails(original), mode)
    assert caught.value is replacement
    assert caught.value.__context__ is original


@pytest.mark.parametrize("mode", MODES)
async def test_the_fallback_runs_under_the_strategys_context(mode: str) -> None:
    """`get_context()` inside the fallback is the context the strategy ran under (its key too)."""
    fallback = Recorder()
    with use_context(operation_key="orders:1"):
        await run(build(fallback), fails(ConnectionError()), mode)
    [args] = fallback.calls
    assert fallback.ambient == [args.context]
    assert args.context.operation_key == "orders:1"


@pytest.mark.parametrize("mode", MODES)
async def test_settle_returns_the_fallback_value_or_its_error(mode: str) -> None:
    """`settle` sees a replaced failure as `Ok`, and a failing fallback as `Err`."""
    pipeline = build(Recorder())

    def broken(_args: FallbackArguments) -> object:
        raise LookupError

    failing = build(broken)
    if mode == "sync":
        assert pipeline.settle(fails(ConnectionError())) == Ok("cached")
        outcome: Outcome[Any] = failing.settle(fails(ConnectionError()))
    else:

        async def down() -> None:
            raise ConnectionError

        assert await pipeline.settle_async(down) == Ok("cached")
        outcome = await failing.settle_async(down)
    assert isinstance(outcome.error, LookupError)


# -- events and on_fallback ---------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
async def test_on_fallback_and_the_event_come_before_the_fallback(mode: str) -> None:
    """Order: the `OnFallback` event (Warning), then `on_fallback`, then the fallback."""
    order: list[str] = []
    events: list[TelemetryEvent] = []
    seen: list[OnFallbackArguments] = []

    def listener(event: TelemetryEvent) -> None:
        if event.name == "OnFallback":
            order.append("event")
            events.append(event)

    def on_fallback(args: OnFallbackArguments) -> None:
        order.append("on_fallback")
        seen.append(args)

    def fallback(_args: FallbackArguments) -> str:
        order.append("fallback")
        return "cached"

    error = ConnectionError()
    pipeline = (
        ResiliencePipelineBuilder(name="orders", telemetry=TelemetryOptions(listeners=[listener]))
        .add_fallback(fallback, on_fallback=on_fallback, name="Cache")
        .build()
    )
    assert await run(pipeline, fails(error), mode) == "cached"
    assert order == ["event", "on_fallback", "fallback"]
    [event] = events
    assert event.severity is Severity.WARNING
    assert event.strategy_name == "Cache"
    assert event.pipeline_name == "orders"
    assert event.outcome == Err(error)
    assert event.arguments == seen[0]
    assert seen[0].outcome == Err(error)


async def test_async_on_fallback_is_awaited() -> None:
    """An async `on_fallback` is awaited in an async execution."""
    seen: list[str] = []

    async def on_fallback(_args: OnFallbackArguments) -> None:
        await asyncio.sleep(0)
        seen.append("on_fallback")

    async def down() -> str:
        raise ConnectionError

    pipeline = ResiliencePipelineBuilder().add_fallback(lambda _a: "cached", on_fallback=on_fallback).build()
    assert await pipeline.execute_async(down) == "cached"
    assert seen == ["on_fallback"]


@pytest.mark.parametrize("mode", MODES)
async def test_no_event_when_nothing_is_replaced(mode: str) -> None:
    """Success and unhandled failures emit no `OnFallback`."""
    events: list[TelemetryEvent] = []
    pipeline = build(Recorder(), events, handle=ConnectionError)
    await run(pipeline, lambda: 1, mode)
    with pytest.raises(KeyError):
        await run(pipeline, fails(KeyError()), mode)
    assert [e.name for e in events if e.name == "OnFallback"] == []


@pytest.mark.parametrize("mode", MODES)
async def test_on_fallback_exception_propagates_and_the_fallback_does_not_run(mode: str) -> None:
    """A failing `on_fallback` fails the execution, as every user callback does."""
    fallback = Recorder()

    def on_fallback(_args: OnFallbackArguments) -> None:
        raise RuntimeError("callback bug")

    with pytest.raises(RuntimeError, match="callback bug"):
        await run(build(fallback, on_fallback=on_fallback), fails(ConnectionError()), mode)
    assert fallback.calls == []


# -- composition --------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
async def test_fallback_after_retries_run_out(auto_clock: FakeTimeProvider, mode: str) -> None:
    """Fallback outside retry: the fallback sees the last failure, after every retry."""
    calls: list[int] = []

    def down() -> None:
        calls.append(1)
        raise ConnectionError(len(calls))

    fallback = Recorder()
    pipeline = (
        ResiliencePipelineBuilder(time_provider=auto_clock)
        .add_fallback(fallback)
        .add_retry(max_retries=2, delay=1)
        .build()
    )
    assert await run(pipeline, down, mode) == "cached"
    assert len(calls) == 3
    assert fallback.calls[0].outcome.error is not None
    assert fallback.calls[0].outcome.error.args == (3,)


async def test_fallback_outside_an_async_timeout(clock: FakeTimeProvider) -> None:
    """Fallback outside timeout: the inner timeout's `TimeoutRejectedError` is replaced."""
    fallback = Recorder()
    pipeline = ResiliencePipelineBuilder(time_provider=clock).add_fallback(fallback).add_timeout(1).build()
    started = asyncio.Event()

    async def slow() -> str:
        started.set()
        await asyncio.sleep(60)
        return "late"

    task = asyncio.ensure_future(pipeline.execute_async(slow))
    await started.wait()
    clock.advance(1)
    assert await task == "cached"
    assert isinstance(fallback.calls[0].outcome.error, TimeoutRejectedError)


def test_fallback_outside_a_sync_timeout(clock: FakeTimeProvider) -> None:
    """Sync: the callable that honours its aborted signal raises the timeout, which is replaced."""
    fallback = Recorder()
    pipeline = ResiliencePipelineBuilder(time_provider=clock).add_fallback(fallback).add_timeout(1).build()

    def cooperative() -> str:
        context = get_context()
        assert context is not None
        clock.advance(1)
        context.signal.raise_if_aborted()
        return "late"

    assert pipeline.execute(cooperative) == "cached"
    assert isinstance(fallback.calls[0].outcome.error, TimeoutRejectedError)


# -- options ------------------------------------------------------------------------------------


def test_factory_and_shortcut_build_the_same_options() -> None:
    """`add_fallback(...)` is `.add(fallback_strategy(...))`."""

    def fallback(_args: FallbackArguments) -> int:
        return 0

    options = fallback_strategy(fallback, handle=KeyError, name="Zero")
    assert options == FallbackStrategyOptions(fallback, handle=KeyError, name="Zero")
    assert PipelineBuilder().add(options).build().execute(fails(KeyError())) == 0
    with pytest.raises(AttributeError):
        options.name = "other"  # type: ignore[misc]


def test_every_bad_option_is_reported_at_build() -> None:
    """`build()` lists every problem as `Fallback.<option>: ...`."""
    builder = ResiliencePipelineBuilder().add_fallback(
        "not callable",  # type: ignore[arg-type]
        handle=BaseException,  # type: ignore[arg-type]
        handle_result=3,  # type: ignore[arg-type]
        on_fallback="x",  # type: ignore[arg-type]
    )
    with pytest.raises(ValidationError) as caught:
        builder.build()
    problems = caught.value.problems
    assert [p.split(":")[0] for p in problems] == [
        "Fallback.fallback",
        "Fallback.handle",
        "Fallback.handle_result",
        "Fallback.on_fallback",
    ]


def test_repr_names_the_fallback() -> None:
    """The built strategy's repr says which fallback it runs."""

    def from_cache(_args: FallbackArguments) -> int:
        return 0

    [strategy] = ResiliencePipelineBuilder().add_fallback(from_cache).build().strategies
    assert "from_cache" in repr(strategy)


# -- composition with a circuit breaker and a lock ----------------------------------------------


def breaker(
    clock: FakeTimeProvider, fallback: Recorder, provider: CircuitBreakerStateProvider, **options: Any
) -> ResiliencePipeline:
    """Fallback outside a circuit breaker that opens on two failures (and stays open: fake clock)."""
    return (
        ResiliencePipelineBuilder(time_provider=clock)
        .add_fallback(fallback, **options)
        .add_circuit_breaker(minimum_throughput=2, failure_ratio=0.5, break_duration=30, state_provider=provider)
        .build()
    )


@pytest.mark.parametrize("mode", MODES)
async def test_an_open_circuits_rejection_is_replaced_when_handled(clock: FakeTimeProvider, mode: str) -> None:
    """Fallback outside breaker, `handle=BrokenCircuitError`: the open circuit's rejection is
    replaced; the callable's own failures (not handled) propagate and open the circuit."""
    fallback = Recorder()
    provider = CircuitBreakerStateProvider()
    pipeline = breaker(clock, fallback, provider, handle=BrokenCircuitError)
    calls: list[int] = []

    def down() -> None:
        calls.append(1)
        raise ConnectionError

    for _ in range(2):
        with pytest.raises(ConnectionError):
            await run(pipeline, down, mode)
    assert provider.state is CircuitState.OPEN
    assert fallback.calls == []
    assert await run(pipeline, down, mode) == "cached"
    assert len(calls) == 2  # rejected: the callable did not run
    [args] = fallback.calls
    assert isinstance(args.outcome.error, BrokenCircuitError)


@pytest.mark.parametrize("mode", MODES)
async def test_an_open_circuits_rejection_propagates_when_not_handled(clock: FakeTimeProvider, mode: str) -> None:
    """`handle=ConnectionError`: the failures are replaced (the breaker still counts them), the
    open circuit's `BrokenCircuitError` is not."""
    fallback = Recorder()
    provider = CircuitBreakerStateProvider()
    pipeline = breaker(clock, fallback, provider, handle=ConnectionError)
    calls: list[int] = []

    def down() -> None:
        calls.append(1)
        raise ConnectionError

    for _ in range(2):
        assert await run(pipeline, down, mode) == "cached"
    assert provider.state is CircuitState.OPEN
    with pytest.raises(BrokenCircuitError):
        await run(pipeline, down, mode)
    assert len(calls) == 2
    assert len(fallback.calls) == 2
    assert all(isinstance(args.outcome.error, ConnectionError) for args in fallback.calls)


@pytest.mark.parametrize("mode", MODES)
async def test_fallback_outside_a_lock_replaces_a_held_keys_rejection(clock: FakeTimeProvider, mode: str) -> None:
    """A held key: `LockNotAcquiredError` is replaced by the fallback value, the callable never
    runs and the holder keeps its lease."""
    store = MemoryLockStore(clock)
    assert store.acquire("job", "holder", 30) is not None
    fallback = Recorder()
    pipeline = (
        ResiliencePipelineBuilder(time_provider=clock)
        .add_fallback(fallback, handle=LockNotAcquiredError)
        .add_lock("job", store=store)
        .build()
    )
    ran: list[bool] = []
    assert await run(pipeline, lambda: ran.append(True), mode) == "cached"
    assert ran == []
    [args] = fallback.calls
    assert isinstance(args.outcome.error, LockNotAcquiredError)
    assert args.outcome.error.key == "job"
    assert store.acquire("job", "someone else", 30) is None  # still the holder's
    assert store.release("job", "holder")


@pytest.mark.parametrize("mode", MODES)
async def test_fallback_outside_a_lock_runs_after_the_lease_is_released(clock: FakeTimeProvider, mode: str) -> None:
    """The lock is taken, the callable fails: the lease is released before the fallback runs,
    and the fallback's value is returned."""
    store = MemoryLockStore(clock)
    events: list[TelemetryEvent] = []
    free_in_fallback: list[bool] = []

    def fallback(_args: FallbackArguments) -> str:
        token = store.acquire("job", "fallback", 30)  # free again: the execution's lease is gone
        free_in_fallback.append(token is not None)
        if token is not None:
            store.release("job", "fallback")
        return "cached"

    pipeline = (
        ResiliencePipelineBuilder(time_provider=clock, telemetry=TelemetryOptions(listeners=[events.append]))
        .add_fallback(fallback)
        .add_lock("job", store=store)
        .build()
    )
    held: list[bool] = []

    def down() -> None:
        held.append(store.acquire("job", "intruder", 30) is None)
        raise ConnectionError

    assert await run(pipeline, down, mode) == "cached"
    assert held == [True]  # the lock was held while the callable ran
    assert free_in_fallback == [True]
    assert len(store) == 0
    names = [e.name for e in events if e.name.startswith("OnLock") or e.name == "OnFallback"]
    assert names == ["OnLockAcquired", "OnLockReleased", "OnFallback"]
