"""The hedging strategy, async: attempts as tasks of the caller's loop, on a fake clock."""

from __future__ import annotations

import asyncio
import math
from typing import TYPE_CHECKING, Any

import pytest

from resilience import (
    Err,
    Ok,
    OperationAbortedError,
    PipelineBuilder,
    ResilienceContext,
    ResiliencePipeline,
    ResiliencePipelineBuilder,
    Signal,
    TimeoutRejectedError,
    ValidationError,
    get_context,
    get_lock_token,
    use_context,
)
from resilience.strategies import (
    HedgingActionArguments,
    HedgingDelayArguments,
    HedgingStrategyOptions,
    OnHedgingArguments,
    hedging_strategy,
)
from resilience.telemetry import Severity, TelemetryEvent, TelemetryOptions

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from resilience.testing import FakeTimeProvider


async def spin(times: int = 10) -> None:
    """Let every ready task and callback of the loop run."""
    for _ in range(times):
        await asyncio.sleep(0)


class Replicas:
    """An async callable whose behaviour depends on the attempt it runs under.

    `plan[n]` is "hang" (wait until cancelled), a value to return, or an exception to raise.
    It records which attempts started, which ended and how, and every attempt's context.
    """

    def __init__(self, plan: dict[int, object]) -> None:
        self.plan = plan
        self.started: list[int] = []
        self.ended: dict[int, str] = {}
        self.contexts: dict[int, ResilienceContext] = {}

    async def __call__(self, *args: object) -> object:
        context = get_context()
        assert context is not None
        attempt = context.attempt
        self.started.append(attempt)
        self.contexts[attempt] = context
        effect = self.plan.get(attempt, "hang")
        try:
            if effect == "hang":
                await asyncio.Event().wait()
            await asyncio.sleep(0)
            if isinstance(effect, BaseException):
                raise effect
        except asyncio.CancelledError:
            self.ended[attempt] = "cancelled"
            raise
        except BaseException as exc:
            self.ended[attempt] = f"raised {type(exc).__name__}"
            raise
        self.ended[attempt] = "returned"
        return effect


def build(clock: FakeTimeProvider, events: list[TelemetryEvent] | None = None, **options: Any) -> ResiliencePipeline:
    telemetry = TelemetryOptions(listeners=[events.append]) if events is not None else None
    return ResiliencePipelineBuilder(time_provider=clock, telemetry=telemetry).add_hedging(**options).build()


def attempts(events: list[TelemetryEvent]) -> list[tuple[int, Severity, bool]]:
    return [
        (e.arguments.attempt, e.severity, e.arguments.handled)  # type: ignore[union-attr]
        for e in events
        if e.name == "ExecutionAttempt"
    ]


# -- the success path -------------------------------------------------------------------------


async def test_the_first_attempt_wins_before_the_delay(clock: FakeTimeProvider) -> None:
    """No hedge, no task, no timer left behind: one attempt, reported as Information."""
    events: list[TelemetryEvent] = []
    replicas = Replicas({0: "primary"})
    tasks_before = len(asyncio.all_tasks())
    assert await build(clock, events, delay=1).execute_async(replicas) == "primary"
    assert replicas.started == [0]
    assert attempts(events) == [(0, Severity.INFORMATION, False)]
    assert [e.name for e in events if e.name == "OnHedging"] == []
    assert clock.pending_timers == 0
    assert len(asyncio.all_tasks()) == tasks_before


async def test_the_original_attempt_runs_in_the_callers_task(clock: FakeTimeProvider) -> None:
    """Attempt 0 is awaited inline: the caller's task, context and contextvars."""
    seen: list[asyncio.Task[Any] | None] = []

    async def work() -> int:
        seen.append(asyncio.current_task())
        return 1

    async def caller() -> int:
        return await build(clock).execute_async(work)

    task = asyncio.ensure_future(caller())
    assert await task == 1
    assert seen == [task]


# -- latency mode -----------------------------------------------------------------------------


async def test_a_slow_attempt_is_hedged_after_the_delay_and_loses(clock: FakeTimeProvider) -> None:
    """After `delay` the hedged attempt starts; it wins; the original is cancelled and awaited first."""
    events: list[TelemetryEvent] = []
    replicas = Replicas({1: "hedge"})
    execution = asyncio.ensure_future(build(clock, events, delay=2).execute_async(replicas))
    await spin()
    assert replicas.started == [0]
    clock.advance(1.9)
    await spin()
    assert replicas.started == [0]
    clock.advance(0.1)
    assert await execution == "hedge"
    assert replicas.started == [0, 1]
    assert replicas.ended == {1: "returned", 0: "cancelled"}  # the loser ended before the return
    [hedging] = [e for e in events if e.name == "OnHedging"]
    assert hedging.severity is Severity.WARNING
    assert isinstance(hedging.arguments, OnHedgingArguments)
    assert hedging.arguments.attempt == 1
    assert hedging.arguments.duration == 2.0
    assert hedging.arguments.context is replicas.contexts[1]
    assert attempts(events) == [(1, Severity.INFORMATION, False), (0, Severity.INFORMATION, False)]
    loser = [e for e in events if e.name == "ExecutionAttempt"][1]
    assert isinstance(loser.outcome, Err)
    assert isinstance(loser.outcome.error, OperationAbortedError)
    assert clock.pending_timers == 0


async def test_the_original_may_still_win(clock: FakeTimeProvider) -> None:
    """Whichever attempt ends first with an unhandled outcome wins; the hedge is cancelled."""
    gate = asyncio.Event()

    async def work() -> str:
        context = get_context()
        assert context is not None
        if context.attempt == 0:
            await gate.wait()
            return "original"
        await asyncio.Event().wait()
        return "never"

    execution = asyncio.ensure_future(build(clock, delay=1).execute_async(work))
    await spin()
    clock.advance(1)
    await spin()
    gate.set()
    assert await execution == "original"


async def test_a_handled_failure_hedges_at_once(clock: FakeTimeProvider) -> None:
    """A handled outcome starts the next attempt without waiting for the delay (in the same task)."""
    events: list[TelemetryEvent] = []
    replicas = Replicas({0: ConnectionError("replica a down"), 1: "b"})
    assert await build(clock, events, delay=10).execute_async(replicas) == "b"
    assert replicas.started == [0, 1]
    assert attempts(events) == [(0, Severity.WARNING, True), (1, Severity.INFORMATION, False)]
    [hedging] = [e for e in events if e.name == "OnHedging"]
    assert hedging.arguments.duration == 0.0  # type: ignore[union-attr]


async def test_when_every_attempt_is_handled_the_original_exception_is_raised(clock: FakeTimeProvider) -> None:
    """All handled: the original call's exception is raised unchanged (Polly's
    `ExecuteAsync_ExceptionsHandled_ShouldThrowLastException` checks the primary's); the attempt
    that ended last is reported as Error."""
    events: list[TelemetryEvent] = []
    original = ConnectionError("a")
    replicas = Replicas({0: original, 1: ConnectionError("b"), 2: ConnectionError("c")})
    with pytest.raises(ConnectionError) as caught:
        await build(clock, events, max_hedged_attempts=2, delay=10).execute_async(replicas)
    assert caught.value is original
    assert [severity for _, severity, _ in attempts(events)] == [Severity.WARNING, Severity.WARNING, Severity.ERROR]


async def test_handled_results_hedge_and_the_original_result_is_returned(clock: FakeTimeProvider) -> None:
    """`handle_result` makes results hedgeable; when all are handled the original call's is returned."""
    replicas = Replicas({0: 503, 1: 502})
    pipeline = build(clock, delay=10, handle_result=lambda status: status >= 500)
    assert await pipeline.execute_async(replicas) == 503
    assert (
        await build(clock, delay=10, handle_result=lambda s: s >= 500).execute_async(Replicas({0: 503, 1: 200})) == 200
    )


async def test_an_unhandled_exception_wins(clock: FakeTimeProvider) -> None:
    """`handle=<type>`: another exception is an answer, not a reason to hedge."""
    replicas = Replicas({0: KeyError("k"), 1: "b"})
    with pytest.raises(KeyError):
        await build(clock, delay=10, handle=ConnectionError).execute_async(replicas)
    assert replicas.started == [0]


# -- parallel and fallback modes ----------------------------------------------------------------


async def test_parallel_mode_starts_every_attempt_at_once(clock: FakeTimeProvider) -> None:
    """`delay=0`: all attempts start together; the first to finish wins, the rest are cancelled."""
    replicas = Replicas({2: "third"})
    assert await build(clock, max_hedged_attempts=3, delay=0).execute_async(replicas) == "third"
    assert sorted(replicas.started) == [0, 1, 2, 3]
    assert replicas.ended == {0: "cancelled", 1: "cancelled", 2: "returned", 3: "cancelled"}


async def test_fallback_mode_hedges_only_after_a_handled_failure(clock: FakeTimeProvider) -> None:
    """`delay=math.inf`: a slow attempt is never hedged; a failed one is, in the caller's task."""
    tasks: list[asyncio.Task[Any] | None] = []
    gate = asyncio.Event()

    async def work() -> str:
        tasks.append(asyncio.current_task())
        context = get_context()
        assert context is not None
        if context.attempt == 0:
            await gate.wait()
            raise ConnectionError
        return "second"

    execution = asyncio.ensure_future(build(clock, delay=math.inf).execute_async(work))
    await spin()
    clock.advance(3600)
    await spin()
    assert len(tasks) == 1
    gate.set()
    assert await execution == "second"
    assert tasks == [execution, execution]


# -- generators and callbacks -------------------------------------------------------------------


async def test_delay_generator_chooses_each_delay(clock: FakeTimeProvider) -> None:
    """`delay_generator` gets the number of the attempt the delay precedes; None keeps `delay`."""
    asked: list[int] = []

    def delays(args: HedgingDelayArguments) -> float | None:
        asked.append(args.attempt)
        assert isinstance(args.context, ResilienceContext)
        return 0.5 if args.attempt == 1 else None

    replicas = Replicas({2: "third"})
    execution = asyncio.ensure_future(
        build(clock, max_hedged_attempts=2, delay=3, delay_generator=delays).execute_async(replicas)
    )
    await spin()
    clock.advance(0.5)
    await spin()
    assert replicas.started == [0, 1]
    clock.advance(2.9)
    await spin()
    assert replicas.started == [0, 1]
    clock.advance(0.1)
    assert await execution == "third"
    assert asked == [1, 2]


async def test_a_negative_generated_delay_is_fallback_mode(clock: FakeTimeProvider) -> None:
    """A negative delay waits for the running attempt (Polly's `GetHedgingDelayAsync_GeneratorSet(-1)`):
    no attempt starts while attempt 0 runs, the next starts when it fails."""
    release = asyncio.Event()

    async def slow_then_fail(*_: object) -> str:
        context = get_context()
        assert context is not None
        if context.attempt == 0:
            await release.wait()
            raise ConnectionError("attempt 0")
        return f"attempt {context.attempt}"

    pipeline = build(clock, max_hedged_attempts=2, delay=0, delay_generator=lambda _args: -1)
    execution = asyncio.ensure_future(pipeline.execute_async(slow_then_fail))
    await spin()
    clock.advance(3600)
    await spin()
    assert not execution.done()  # a delay of 0 would have launched attempts 1 and 2 at once
    release.set()
    assert await execution == "attempt 1"


async def test_action_generator_gives_hedged_attempts_another_callable(clock: FakeTimeProvider) -> None:
    """The callable it returns gets the original arguments; None keeps the original callable."""
    seen: list[HedgingActionArguments] = []

    async def replica_a(key: str, *, region: str) -> str:
        raise ConnectionError

    async def replica_b(key: str, *, region: str) -> str:
        return f"b:{key}:{region}"

    def other_replica(args: HedgingActionArguments) -> Callable[..., Awaitable[str]] | None:
        seen.append(args)
        return replica_b if args.attempt == 1 else None

    pipeline = build(clock, max_hedged_attempts=2, delay=10, action_generator=other_replica)
    assert await pipeline.execute_async(replica_a, "k1", region="eu") == "b:k1:eu"
    [args] = seen
    assert args.attempt == 1
    assert args.callback is replica_a
    assert args.context.attempt == 1


async def test_action_generator_returning_none_runs_the_original(clock: FakeTimeProvider) -> None:
    """None from the generator: the hedged attempt calls the original callable."""
    replicas = Replicas({0: ConnectionError(), 1: "again"})
    pipeline = build(clock, delay=10, action_generator=lambda _args: None)
    assert await pipeline.execute_async(replicas) == "again"


async def test_async_callbacks_are_awaited(clock: FakeTimeProvider) -> None:
    """`on_hedging`, `delay_generator` and `action_generator` may be coroutine functions."""
    heard: list[int] = []

    async def on_hedging(args: OnHedgingArguments) -> None:
        heard.append(args.attempt)

    async def delays(_args: HedgingDelayArguments) -> float:
        return 10

    async def actions(_args: HedgingActionArguments) -> None:
        return None

    replicas = Replicas({0: ConnectionError(), 1: "b"})
    pipeline = build(clock, delay=1, on_hedging=on_hedging, delay_generator=delays, action_generator=actions)
    assert await pipeline.execute_async(replicas) == "b"
    assert heard == [1]


async def test_a_failing_callback_fails_the_execution_and_aborts_the_attempts(clock: FakeTimeProvider) -> None:
    """An exception from `on_hedging` propagates; the running attempts are cancelled first."""

    def on_hedging(_args: OnHedgingArguments) -> None:
        raise RuntimeError("callback bug")

    replicas = Replicas({})
    execution = asyncio.ensure_future(build(clock, delay=1, on_hedging=on_hedging).execute_async(replicas))
    await spin()
    clock.advance(1)
    with pytest.raises(RuntimeError, match="callback bug"):
        await execution
    assert replicas.ended == {0: "cancelled"}


# -- contexts, signals, cancellation ------------------------------------------------------------


async def test_each_attempt_has_its_own_context_and_signal(clock: FakeTimeProvider) -> None:
    """Own signal (a child of the caller's), own attempt number, the caller's key and properties."""
    caller_signal = Signal()
    replicas = Replicas({})
    with use_context(operation_key="k", signal=caller_signal):
        execution = asyncio.ensure_future(build(clock, delay=0).execute_async(replicas))
        await spin()
    first, second = replicas.contexts[0], replicas.contexts[1]
    assert (first.attempt, second.attempt) == (0, 1)
    assert first.signal is not second.signal
    assert first.operation_key == second.operation_key == "k"
    caller_signal.abort()
    with pytest.raises(OperationAbortedError):
        await execution
    assert replicas.ended == {0: "cancelled", 1: "cancelled"}


async def test_aborting_one_attempts_signal_does_not_stop_the_others(clock: FakeTimeProvider) -> None:
    """An attempt's signal is its own: aborting it ends that attempt only (a handled failure)."""
    replicas = Replicas({1: "b"})
    execution = asyncio.ensure_future(build(clock, delay=5).execute_async(replicas))
    await spin()
    replicas.contexts[0].signal.abort()
    assert await execution == "b"


async def test_cancelling_the_caller_cancels_and_awaits_every_attempt(clock: FakeTimeProvider) -> None:
    """The caller's cancellation reaches every attempt, and each has ended before it propagates."""
    replicas = Replicas({})
    execution = asyncio.ensure_future(build(clock, max_hedged_attempts=2, delay=0).execute_async(replicas))
    await spin()
    assert sorted(replicas.started) == [0, 1, 2]
    execution.cancel()
    with pytest.raises(asyncio.CancelledError):
        await execution
    assert replicas.ended == {0: "cancelled", 1: "cancelled", 2: "cancelled"}


async def test_hedging_inside_a_timeout(clock: FakeTimeProvider) -> None:
    """An outer timeout aborts every attempt (cancelled and awaited) and raises `TimeoutRejectedError`."""
    replicas = Replicas({})
    pipeline = ResiliencePipelineBuilder(time_provider=clock).add_timeout(3).add_hedging(delay=1).build()
    execution = asyncio.ensure_future(pipeline.execute_async(replicas))
    await spin()
    clock.advance(1)
    await spin()
    assert replicas.started == [0, 1]
    clock.advance(2)
    with pytest.raises(TimeoutRejectedError):
        await execution
    assert replicas.ended == {0: "cancelled", 1: "cancelled"}
    assert clock.pending_timers == 0


async def test_retry_around_hedging_runs_a_hedged_execution_per_retry(auto_clock: FakeTimeProvider) -> None:
    """Retry outside hedging: each retry is a whole hedged execution (both attempts handled)."""
    calls: list[tuple[int, int]] = []
    retry_attempts: list[int] = []

    async def work() -> str:
        context = get_context()
        assert context is not None
        calls.append((len(retry_attempts), context.attempt))
        if len(calls) < 4:
            raise ConnectionError
        return "ok"

    def on_retry(args: Any) -> None:
        retry_attempts.append(args.attempt)

    pipeline = (
        ResiliencePipelineBuilder(time_provider=auto_clock)
        .add_retry(max_retries=2, delay=1, on_retry=on_retry)
        .add_hedging(delay=10)
        .build()
    )
    assert await pipeline.execute_async(work) == "ok"
    assert calls == [(0, 0), (0, 1), (1, 0), (1, 1)]


async def test_a_lock_outside_hedging_is_one_lease_for_every_attempt(clock: FakeTimeProvider) -> None:
    """Lock outside hedging: one acquisition, every attempt sees its token, released after all end."""
    events: list[TelemetryEvent] = []
    tokens: dict[int, int | None] = {}

    async def work() -> str:
        context = get_context()
        assert context is not None
        tokens[context.attempt] = get_lock_token()
        if context.attempt == 0:
            await asyncio.Event().wait()
        return "hedge"

    pipeline = (
        ResiliencePipelineBuilder(time_provider=clock, telemetry=TelemetryOptions(listeners=[events.append]))
        .add_lock("job", ttl=30)
        .add_hedging(delay=1)
        .build()
    )
    execution = asyncio.ensure_future(pipeline.execute_async(work))
    await spin()
    clock.advance(1)
    assert await execution == "hedge"
    assert tokens[0] is not None
    assert tokens[0] == tokens[1]
    names = [e.name for e in events if e.name.startswith("OnLock")]
    assert names == ["OnLockAcquired", "OnLockReleased"]


async def test_settle_returns_the_winner_or_the_original_failure(clock: FakeTimeProvider) -> None:
    """`settle_async` gives `Ok(winner)`, or `Err(the original call's handled failure)`."""
    assert await build(clock, delay=10).settle_async(Replicas({0: ConnectionError(), 1: 7})) == Ok(7)
    outcome = await build(clock, delay=10).settle_async(Replicas({0: LookupError(), 1: ConnectionError()}))
    assert isinstance(outcome.error, LookupError)


async def test_a_base_exception_is_never_handled(clock: FakeTimeProvider) -> None:
    """A `BaseException` of an attempt propagates, even with a catch-all predicate."""

    class Stop(BaseException):
        pass

    replicas = Replicas({0: Stop(), 1: "b"})
    with pytest.raises(Stop):
        await build(clock, delay=10, handle=lambda _outcome: True).execute_async(replicas)
    assert replicas.started == [0]


async def test_no_attempt_starts_under_an_aborted_signal(clock: FakeTimeProvider) -> None:
    """The caller already gave up: nothing runs."""
    signal = Signal()
    signal.abort()
    replicas = Replicas({0: "a"})
    with use_context(signal=signal), pytest.raises(OperationAbortedError):
        await build(clock).execute_async(replicas)
    assert replicas.started == []


# -- options ------------------------------------------------------------------------------------


def test_factory_and_shortcut_build_the_same_options() -> None:
    """`add_hedging(...)` is `.add(hedging_strategy(...))`; the options are frozen."""
    options = hedging_strategy(max_hedged_attempts=3, delay=0.5, name="Replicas")
    assert options == HedgingStrategyOptions(max_hedged_attempts=3, delay=0.5, name="Replicas")
    assert options.delay == 0.5
    [strategy] = PipelineBuilder().add(options).build().strategies
    assert "max_hedged_attempts=3" in repr(strategy)
    with pytest.raises(AttributeError):
        options.delay = 1  # type: ignore[misc]


@pytest.mark.parametrize(
    ("options", "problem"),
    [
        ({"max_hedged_attempts": 0}, "Hedging.max_hedged_attempts: must be >= 1"),
        ({"max_hedged_attempts": 11}, "Hedging.max_hedged_attempts: must be <= 10"),
        ({"max_hedged_attempts": True}, "Hedging.max_hedged_attempts: must be an int"),
        ({"delay": -1}, "Hedging.delay: must be >= 0"),
        ({"delay": math.nan}, "Hedging.delay: must be a number"),
        ({"delay": -math.inf}, "Hedging.delay: must be finite"),
        ({"delay_generator": 3}, "Hedging.delay_generator: must be callable"),
        ({"action_generator": 3}, "Hedging.action_generator: must be callable"),
        ({"handle": BaseException}, "Hedging.handle: must be an Exception subclass"),
        ({"handle_result": 3}, "Hedging.handle_result: must be callable"),
        ({"on_hedging": 3}, "Hedging.on_hedging: must be callable"),
    ],
)
def test_bad_options_are_reported_at_build(options: dict[str, Any], problem: str) -> None:
    """Each bad option is one problem of the one `ValidationError`."""
    with pytest.raises(ValidationError) as caught:
        ResiliencePipelineBuilder().add_hedging(**options).build()
    [reported] = caught.value.problems
    assert reported.startswith(problem)


@pytest.mark.parametrize("delay", [0, 2.5, math.inf])
def test_every_mode_is_a_valid_delay(delay: float) -> None:
    """0 (parallel), a finite delay (latency) and infinity (fallback) are valid."""
    ResiliencePipelineBuilder().add_hedging(delay=delay, max_hedged_attempts=10).build()


def test_a_nonsense_generated_delay_fails_the_execution(auto_clock: FakeTimeProvider) -> None:
    """A delay generator returning something else than a duration raises `ValidationError`."""
    pipeline = build(auto_clock, delay_generator=lambda _args: "soon")  # type: ignore[arg-type, return-value]
    with pytest.raises(ValidationError, match="delay_generator returned 'soon'"):
        pipeline.execute(lambda: 1)


async def test_attempt_duration_histogram_through_the_event(clock: FakeTimeProvider) -> None:
    """`ExecutionAttempt` carries the attempt's duration on the provider's clock."""
    events: list[TelemetryEvent] = []
    replicas = Replicas({1: "b"})
    execution = asyncio.ensure_future(build(clock, events, delay=2).execute_async(replicas))
    await spin()
    clock.advance(2)
    await execution
    durations = {e.arguments.attempt: e.arguments.duration for e in events if e.name == "ExecutionAttempt"}  # type: ignore[union-attr]
    assert durations == {1: 0.0, 0: 2.0}


async def test_a_delay_that_passes_on_another_thread_starts_the_hedge_on_the_loop(clock: FakeTimeProvider) -> None:
    """A timer firing off the loop's thread (a clock advanced elsewhere) hands over to the loop."""
    replicas = Replicas({1: "hedge"})
    execution = asyncio.ensure_future(build(clock, delay=1).execute_async(replicas))
    await spin()
    await asyncio.to_thread(clock.advance, 1)
    assert await execution == "hedge"
    assert replicas.ended == {1: "returned", 0: "cancelled"}


async def test_a_delay_passing_after_the_first_answer_changes_nothing(clock: FakeTimeProvider) -> None:
    """The original answered; a timer that still fires (raced) starts nothing."""
    replicas = Replicas({0: "original"})
    pipeline = build(clock, delay=1)
    [strategy] = pipeline.strategies
    assert await pipeline.execute_async(replicas) == "original"
    from resilience.strategies.hedging._strategy import _AsyncStart

    start = _AsyncStart(strategy, replicas, ResilienceContext())  # type: ignore[arg-type]
    start.done = True
    start.fire()
    assert start.run is None
    start.scope.detach()


async def test_action_generator_when_the_delay_passes(clock: FakeTimeProvider) -> None:
    """A hedge started by the delay (on the clock's thread) still gets the other callable."""

    async def primary(key: str) -> str:
        await asyncio.Event().wait()
        return "never"

    async def secondary(key: str) -> str:
        return f"secondary:{key}"

    pipeline = build(clock, delay=1, action_generator=lambda _args: secondary)
    execution = asyncio.ensure_future(pipeline.execute_async(primary, "k"))
    await spin()
    clock.advance(1)
    assert await execution == "secondary:k"
