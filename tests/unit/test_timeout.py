"""The timeout strategy: deadlines under a fake clock, sync (cooperative) and async (cancelling)."""

from __future__ import annotations

import asyncio
import datetime as dt
import threading
from typing import TYPE_CHECKING, Any

import pytest

from resilience import (
    ResilienceContext,
    ResiliencePipeline,
    ResiliencePipelineBuilder,
    Signal,
    TimeoutRejectedError,
    ValidationError,
    get_context,
    use_context,
)
from resilience.telemetry import Severity, TelemetryEvent, TelemetryOptions

if TYPE_CHECKING:
    from collections.abc import Callable

    from resilience.strategies import OnTimeoutArguments, TimeoutGeneratorArguments
    from resilience.testing import FakeTimeProvider


def context() -> ResilienceContext:
    current = get_context()
    assert current is not None
    return current


def build(
    clock: FakeTimeProvider, *timeouts: float, events: list[TelemetryEvent] | None = None, **options: Any
) -> ResiliencePipeline:
    telemetry = TelemetryOptions(listeners=[events.append]) if events is not None else None
    builder = ResiliencePipelineBuilder(time_provider=clock, telemetry=telemetry)
    for n, timeout in enumerate(timeouts or (5.0,)):
        builder.add_timeout(timeout, name=f"Timeout{n}", **options)
    return builder.build()


def run_with_advance(clock: FakeTimeProvider, seconds: float, body: Callable[[], Any], timers: int = 1) -> Any:
    """Run `body` here while another thread advances the clock once the deadlines are armed."""

    def advance() -> None:
        while clock.pending_timers < timers:
            threading.Event().wait(0.001)
        clock.advance(seconds)

    helper = threading.Thread(target=advance)
    helper.start()
    try:
        return body()
    finally:
        helper.join(5)


# -- sync: cooperative ---------------------------------------------------------------------------


def test_sync_deadline_aborts_the_signal_and_raises(clock: FakeTimeProvider) -> None:
    """The callable's signal aborts at the deadline; raising its reason gives TimeoutRejectedError."""
    timeouts: list[OnTimeoutArguments] = []
    events: list[TelemetryEvent] = []
    pipeline = build(clock, 5.0, events=events, on_timeout=timeouts.append)
    seen: list[BaseException | None] = []

    def cooperative() -> None:
        signal = context().signal
        assert signal.wait(5)
        seen.append(signal.reason)
        signal.raise_if_aborted()

    with pytest.raises(TimeoutRejectedError) as caught:
        run_with_advance(clock, 5.0, lambda: pipeline.execute(cooperative))
    assert caught.value is seen[0]
    assert caught.value.timeout == 5.0
    assert caught.value.__cause__ is None
    assert [(a.timeout, a.context.operation_key) for a in timeouts] == [(5.0, None)]
    assert [(e.name, e.severity) for e in events if e.strategy_name] == [("OnTimeout", Severity.ERROR)]


def test_sync_exception_after_deadline_becomes_timeout(clock: FakeTimeProvider) -> None:
    """An exception that ends the callable after the deadline becomes TimeoutRejectedError from it."""
    error = ConnectionError("late")

    def late_failure() -> None:
        assert context().signal.wait(5)
        raise error

    with pytest.raises(TimeoutRejectedError) as caught:
        run_with_advance(clock, 5.0, lambda: build(clock).execute(late_failure))
    assert caught.value.__cause__ is error


def test_sync_success_after_deadline_is_returned(clock: FakeTimeProvider) -> None:
    """A callable that ignores the deadline and returns has its result returned, with no OnTimeout."""
    timeouts: list[OnTimeoutArguments] = []

    def stubborn() -> str:
        assert context().signal.wait(5)
        return "done anyway"

    result = run_with_advance(clock, 9.0, lambda: build(clock, on_timeout=timeouts.append).execute(stubborn))
    assert result == "done anyway"
    assert timeouts == []


def test_sync_timer_cancelled_and_signal_detached(clock: FakeTimeProvider) -> None:
    """A call that ends in time leaves no timer behind and no callback on the caller's signal."""
    caller = Signal()
    with use_context(signal=caller):
        assert build(clock).execute(lambda: 42) == 42
        with pytest.raises(KeyError):
            build(clock).execute(lambda: {}["x"])
    assert clock.pending_timers == 0
    assert not caller._callbacks


def test_sync_aborted_caller_never_starts_the_callable(clock: FakeTimeProvider) -> None:
    """Under an aborted signal the callable is not started; the reason propagates unchanged."""
    caller = Signal()
    reason = RuntimeError("stop")
    caller.abort(reason)
    calls: list[int] = []
    with use_context(signal=caller), pytest.raises(RuntimeError) as caught:
        build(clock).execute(lambda: calls.append(1))
    assert caught.value is reason
    assert calls == []


def test_sync_caller_abort_passes_through(clock: FakeTimeProvider) -> None:
    """The caller's abort reaches the callable and its reason propagates, not a TimeoutRejectedError."""
    caller = Signal()
    reason = RuntimeError("caller gave up")

    def cooperative() -> None:
        caller.abort(reason)
        context().signal.raise_if_aborted()

    with use_context(signal=caller), pytest.raises(RuntimeError) as caught:
        build(clock).execute(cooperative)
    assert caught.value is reason


@pytest.mark.parametrize(("outer", "inner", "fired"), [(10.0, 1.0, "Timeout1"), (1.0, 10.0, "Timeout0")])
def test_sync_nested_timeouts(clock: FakeTimeProvider, outer: float, inner: float, fired: str) -> None:
    """With two timeouts, the one whose deadline passes first is the one reported."""
    events: list[TelemetryEvent] = []
    pipeline = build(clock, outer, inner, events=events)

    def cooperative() -> None:
        assert context().signal.wait(5)
        context().signal.raise_if_aborted()

    with pytest.raises(TimeoutRejectedError) as caught:
        run_with_advance(clock, 1.0, lambda: pipeline.execute(cooperative), timers=2)
    assert caught.value.timeout == 1.0
    assert [e.strategy_name for e in events if e.name == "OnTimeout"] == [fired]


# -- async: cancelling -----------------------------------------------------------------------------


async def test_async_deadline_with_auto_advance(auto_clock: FakeTimeProvider) -> None:
    """An async callable sleeping past the deadline is cancelled and TimeoutRejectedError raised."""
    timeouts: list[OnTimeoutArguments] = []
    events: list[TelemetryEvent] = []

    async def slow() -> None:
        await auto_clock.sleep_async(10)
        await asyncio.sleep(0)
        pytest.fail("not cancelled")

    with pytest.raises(TimeoutRejectedError) as caught:
        await build(auto_clock, 5.0, events=events, on_timeout=timeouts.append).execute_async(slow)
    assert caught.value.timeout == 5.0
    assert len(timeouts) == 1
    assert [e.name for e in events if e.strategy_name] == ["OnTimeout"]


async def test_async_deadline_when_the_test_advances(clock: FakeTimeProvider) -> None:
    """The test advancing the clock past the deadline cancels the callable in its own task."""
    tasks: list[asyncio.Task[Any] | None] = []

    async def slow() -> None:
        tasks.append(asyncio.current_task())
        await clock.sleep_async(60)

    execution = asyncio.ensure_future(build(clock, 5.0).execute_async(slow))
    while not tasks:
        await asyncio.sleep(0)
    clock.advance(5.0)
    with pytest.raises(TimeoutRejectedError):
        await execution
    assert tasks == [execution]  # no new task: the callable ran in the caller's
    assert clock.pending_timers == 0


async def test_async_outer_cancellation_passes_through(clock: FakeTimeProvider) -> None:
    """Cancelling the caller's task gives CancelledError, not TimeoutRejectedError."""
    started = asyncio.Event()

    async def slow() -> None:
        started.set()
        await clock.sleep_async(60)

    execution = asyncio.ensure_future(build(clock, 5.0).execute_async(slow))
    await started.wait()
    execution.cancel()
    with pytest.raises(asyncio.CancelledError):
        await execution
    assert clock.pending_timers == 0


async def test_async_outer_asyncio_timeout_passes_through(clock: FakeTimeProvider) -> None:
    """An enclosing asyncio.timeout fires as its own TimeoutError, not ours."""

    async def slow() -> None:
        await clock.sleep_async(60)

    with pytest.raises(TimeoutError) as caught:
        async with asyncio.timeout(0):
            await build(clock, 5.0).execute_async(slow)
    assert not isinstance(caught.value, TimeoutRejectedError)


@pytest.mark.parametrize(("outer", "inner", "fired"), [(10.0, 1.0, "Timeout1"), (1.0, 10.0, "Timeout0")])
async def test_async_nested_timeouts(clock: FakeTimeProvider, outer: float, inner: float, fired: str) -> None:
    """Inner fires: the inner's error passes the outer unchanged; outer fires: the outer's error."""
    events: list[TelemetryEvent] = []
    timeouts: list[OnTimeoutArguments] = []
    started = asyncio.Event()

    async def slow() -> None:
        started.set()
        await clock.sleep_async(60)

    pipeline = build(clock, outer, inner, events=events, on_timeout=timeouts.append)
    execution = asyncio.ensure_future(pipeline.execute_async(slow))
    await started.wait()
    clock.advance(1.0)
    with pytest.raises(TimeoutRejectedError) as caught:
        await execution
    assert caught.value.timeout == 1.0
    assert [e.strategy_name for e in events if e.name == "OnTimeout"] == [fired]
    assert len(timeouts) == 1
    assert clock.pending_timers == 0


async def test_async_exception_after_deadline_becomes_timeout(auto_clock: FakeTimeProvider) -> None:
    """A callable that turns the cancellation into its own error gets TimeoutRejectedError from it."""
    error = ConnectionError("closed")

    async def converts() -> None:
        try:
            await auto_clock.sleep_async(60)
            await asyncio.sleep(0)
        except asyncio.CancelledError:
            raise error from None

    with pytest.raises(TimeoutRejectedError) as caught:
        await build(auto_clock, 5.0).execute_async(converts)
    assert caught.value.__cause__ is error


async def test_async_success_after_deadline_is_returned(auto_clock: FakeTimeProvider) -> None:
    """A callable that swallows the cancellation and returns has its result returned."""
    timeouts: list[OnTimeoutArguments] = []

    async def swallows() -> str:
        try:
            await auto_clock.sleep_async(60)
            await asyncio.sleep(0)
        except asyncio.CancelledError:
            return "finished"
        return "never"

    assert await build(auto_clock, 5.0, on_timeout=timeouts.append).execute_async(swallows) == "finished"
    assert timeouts == []


async def test_async_on_timeout_is_awaited(auto_clock: FakeTimeProvider) -> None:
    """An async `on_timeout` is awaited before TimeoutRejectedError propagates."""
    calls: list[float] = []

    async def on_timeout(args: OnTimeoutArguments) -> None:
        await asyncio.sleep(0)
        calls.append(args.timeout)

    async def slow() -> None:
        await auto_clock.sleep_async(60)
        await asyncio.sleep(0)

    with pytest.raises(TimeoutRejectedError):
        await build(auto_clock, 2.0, on_timeout=on_timeout).execute_async(slow)
    assert calls == [2.0]


# -- timeout_generator ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("generated", "expected"),
    [(None, 5.0), (2, 2.0), (dt.timedelta(seconds=3), 3.0), (0, None), (-1.0, None), (float("inf"), None)],
)
async def test_timeout_generator_values(
    auto_clock: FakeTimeProvider, generated: object, expected: float | None
) -> None:
    """None uses `timeout`; 0, negative or infinite means no timeout for that call."""
    seen: list[TimeoutGeneratorArguments] = []

    def generator(args: TimeoutGeneratorArguments) -> Any:
        seen.append(args)
        return generated

    async def slow() -> str:
        await auto_clock.sleep_async(100)
        await asyncio.sleep(0)
        return "slow but fine"

    pipeline = build(auto_clock, 5.0, timeout_generator=generator)
    if expected is None:
        assert await pipeline.execute_async(slow) == "slow but fine"
        assert pipeline.execute(lambda: "sync fine") == "sync fine"
    else:
        with pytest.raises(TimeoutRejectedError) as caught:
            await pipeline.execute_async(slow)
        assert caught.value.timeout == expected
    assert isinstance(seen[0].context, ResilienceContext)


async def test_async_timeout_generator_is_awaited(auto_clock: FakeTimeProvider) -> None:
    """An async generator's value is awaited."""

    async def generator(args: TimeoutGeneratorArguments) -> float:
        return 1.0

    async def slow() -> None:
        await auto_clock.sleep_async(100)
        await asyncio.sleep(0)

    with pytest.raises(TimeoutRejectedError) as caught:
        await build(auto_clock, 5.0, timeout_generator=generator).execute_async(slow)
    assert caught.value.timeout == 1.0


@pytest.mark.parametrize("bad", ["5", float("nan"), True])
def test_timeout_generator_garbage_is_misuse(clock: FakeTimeProvider, bad: object) -> None:
    """A generator returning a non-duration raises ValidationError."""
    with pytest.raises(ValidationError, match="timeout_generator"):
        build(clock, timeout_generator=lambda args: bad).execute(lambda: None)


def test_a_late_deadline_after_the_callers_abort_is_not_ours() -> None:
    """If the caller's abort came first, a deadline firing later does not claim the signal."""
    from resilience.strategies.timeout._strategy import _Deadline

    caller = Signal()
    child = caller.child()
    deadline = _Deadline(child, 1.0)
    caller.abort()
    deadline()
    assert not deadline.fired
    fresh = _Deadline(Signal(), 1.0)
    assert not fresh.fired
    fresh()
    assert fresh.fired
