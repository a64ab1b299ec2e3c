"""The chaos strategies: when they inject, what they inject, and what they report."""

from __future__ import annotations

import asyncio
import datetime as dt
import math
import threading
from typing import TYPE_CHECKING, Any

import pytest

from resilience import (
    Err,
    Ok,
    OperationAbortedError,
    PipelineBuilder,
    ResiliencePipeline,
    ResiliencePipelineBuilder,
    Signal,
    ValidationError,
    use_context,
)
from resilience.strategies import (
    BehaviorGeneratorArguments,
    EnabledGeneratorArguments,
    FaultGeneratorArguments,
    InjectionRateGeneratorArguments,
    LatencyGeneratorArguments,
    OnBehaviorInjectedArguments,
    OnFaultInjectedArguments,
    OnLatencyInjectedArguments,
    OnOutcomeInjectedArguments,
    OutcomeGeneratorArguments,
    chaos_behavior_strategy,
    chaos_fault_strategy,
    chaos_latency_strategy,
    chaos_outcome_strategy,
)
from resilience.telemetry import Severity, TelemetryEvent, TelemetryOptions
from resilience.testing import FakeTimeProvider
from tests.unit.modes import MODES, run

if TYPE_CHECKING:
    from collections.abc import Callable


class Calls:
    """A callable that counts its calls and returns "ok"."""

    def __init__(self) -> None:
        self.count = 0

    def __call__(self) -> str:
        self.count += 1
        return "ok"


def build(clock: FakeTimeProvider, *options: Any, events: list[TelemetryEvent] | None = None) -> ResiliencePipeline:
    telemetry = TelemetryOptions(listeners=[events.append]) if events is not None else None
    builder = PipelineBuilder(name="chaos", time_provider=clock, telemetry=telemetry)
    for option in options:
        builder.add(option)
    return builder.build()


def returning(value: object, mode: str) -> Callable[[Any], Any]:
    """A generator or callback returning `value`, plain in sync and a coroutine in async."""
    if mode == "sync":
        return lambda _arguments: value

    async def generate(_arguments: Any) -> object:
        await asyncio.sleep(0)
        return value

    return generate


# -- the injection decision -------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("rate", [0.001, 0.1, 0.5, 0.9])
async def test_injection_rate_within_statistical_bounds(mode: str, rate: float) -> None:
    """Over 10,000 executions the injected share is within 5 standard deviations of the rate."""
    clock = FakeTimeProvider(seed=7)
    pipeline = build(clock, chaos_outcome_strategy(outcome=Ok("chaos"), injection_rate=rate))
    draws = 10_000
    injected = 0
    for _ in range(draws):
        injected += await run(pipeline, Calls(), mode) == "chaos"
    sigma = math.sqrt(draws * rate * (1 - rate))
    assert abs(injected - draws * rate) <= 5 * sigma + 1


@pytest.mark.parametrize("mode", MODES)
async def test_same_seed_same_injections(mode: str) -> None:
    """Two pipelines on clocks with the same seed inject into the same executions."""

    async def pattern(seed: int) -> list[bool]:
        pipeline = build(FakeTimeProvider(seed=seed), chaos_outcome_strategy(outcome=Ok("chaos"), injection_rate=0.3))
        return [await run(pipeline, Calls(), mode) == "chaos" for _ in range(2_000)]

    first = await pattern(42)
    assert first == await pattern(42)
    assert first != await pattern(43)
    assert 400 < sum(first) < 800


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(
    ("enabled", "generated", "injects"),
    [(True, None, True), (False, True, True), (True, False, False), (False, None, False)],
)
async def test_enabled_generator_wins_over_enabled(
    mode: str, *, enabled: bool, generated: bool | None, injects: bool
) -> None:
    """`enabled_generator` decides when given; else `enabled` does."""
    seen: list[EnabledGeneratorArguments] = []

    def record(arguments: EnabledGeneratorArguments) -> Any:
        seen.append(arguments)
        return returning(generated, mode)(arguments)

    generator = None if generated is None else record
    options = chaos_outcome_strategy(
        outcome=Ok("chaos"), injection_rate=1, enabled=enabled, enabled_generator=generator
    )
    calls = Calls()
    result = await run(build(FakeTimeProvider(), options), calls, mode)
    assert result == ("chaos" if injects else "ok")
    assert calls.count == (0 if injects else 1)
    assert len(seen) == (0 if generated is None else 1)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(
    ("generated", "injects"), [(1.0, True), (0.0, False), (7, True), (-3, False), (math.nan, False)]
)
async def test_injection_rate_generator_is_clamped(mode: str, generated: float, *, injects: bool) -> None:
    """The generated rate wins over `injection_rate` and is clamped to 0..1 (NaN: 0)."""
    options = chaos_outcome_strategy(
        outcome=Ok("chaos"), injection_rate=0.5, injection_rate_generator=returning(generated, mode)
    )
    results = {await run(build(FakeTimeProvider(seed=1), options), Calls(), mode) for _ in range(50)}
    assert results == {"chaos" if injects else "ok"}


@pytest.mark.parametrize("mode", MODES)
async def test_injection_rate_generator_sees_the_context(mode: str) -> None:
    """The rate generator receives the execution's context (a per-operation rate)."""

    def rate(arguments: InjectionRateGeneratorArguments) -> float:
        return 1.0 if arguments.context.operation_key == "canary" else 0.0

    pipeline = build(FakeTimeProvider(), chaos_outcome_strategy(outcome=Ok("chaos"), injection_rate_generator=rate))
    with use_context(operation_key="canary"):
        assert await run(pipeline, Calls(), mode) == "chaos"
    with use_context(operation_key="stable"):
        assert await run(pipeline, Calls(), mode) == "ok"


@pytest.mark.parametrize("mode", MODES)
async def test_a_rate_generator_returning_nonsense_is_misuse(mode: str) -> None:
    """A generated rate that is not a number raises ValidationError saying what to return."""
    options = chaos_outcome_strategy(outcome=Ok("x"), injection_rate_generator=returning("high", mode))
    with pytest.raises(ValidationError, match="return a number from 0 to 1"):
        await run(build(FakeTimeProvider(), options), Calls(), mode)


def test_an_async_generator_in_a_sync_execution_is_misuse() -> None:
    """A sync execution refuses an enabled generator that returns an awaitable."""
    options = chaos_outcome_strategy(outcome=Ok("x"), enabled_generator=returning(True, "async"))
    with pytest.raises(ValidationError, match="execute_async"):
        build(FakeTimeProvider(), options).execute(Calls())


@pytest.mark.parametrize(
    "options",
    [
        chaos_fault_strategy(fault=ValueError, enabled=False),
        chaos_fault_strategy(fault=ValueError, injection_rate=0),
        chaos_latency_strategy(latency=1, enabled=False),
        chaos_latency_strategy(latency=0, injection_rate=1),
        chaos_outcome_strategy(outcome=Ok(1), injection_rate=0.0),
        chaos_behavior_strategy(behavior=lambda _arguments: None, enabled=False),
    ],
)
def test_chaos_that_can_never_inject_is_left_out_of_the_pipeline(options: Any) -> None:
    """Switched-off chaos (no generator that could switch it on) is not built: it costs nothing."""
    pipeline = build(FakeTimeProvider(), options, chaos_fault_strategy(fault=ValueError, injection_rate=0.5))
    assert [type(strategy).__name__ for strategy in pipeline.strategies] == ["ChaosFaultStrategy"]
    assert build(FakeTimeProvider(), options).strategies == ()


def test_chaos_that_a_generator_can_switch_on_is_kept() -> None:
    """With a generator, switched-off options still build a strategy (the generator may switch it on)."""
    kept = [
        chaos_fault_strategy(fault=ValueError, enabled=False, enabled_generator=lambda _arguments: False),
        chaos_fault_strategy(fault=ValueError, injection_rate=0, injection_rate_generator=lambda _arguments: 0.0),
        chaos_latency_strategy(latency=0, injection_rate=1, latency_generator=lambda _arguments: None),
    ]
    assert len(build(FakeTimeProvider(), *kept).strategies) == 3


@pytest.mark.parametrize("mode", MODES)
async def test_nothing_is_injected_into_an_aborted_execution(mode: str) -> None:
    """Under an aborted signal the behavior does not run and the reason is raised."""
    behaved: list[BehaviorGeneratorArguments] = []
    pipeline = build(FakeTimeProvider(), chaos_behavior_strategy(behavior=behaved.append, injection_rate=1))
    signal = Signal()
    signal.abort()
    with use_context(signal=signal), pytest.raises(OperationAbortedError):
        await run(pipeline, Calls(), mode)
    assert behaved == []


@pytest.mark.parametrize("mode", MODES)
async def test_no_generator_runs_under_an_aborted_signal(mode: str) -> None:
    """Aborted before the strategy: neither the enabled nor the injection-rate generator runs."""
    ran: list[str] = []

    def enabled(_arguments: EnabledGeneratorArguments) -> bool:
        ran.append("enabled")
        return True

    def rate(_arguments: InjectionRateGeneratorArguments) -> float:
        ran.append("rate")
        return 1.0

    pipeline = build(
        FakeTimeProvider(),
        chaos_fault_strategy(fault=ConnectionError, enabled_generator=enabled, injection_rate_generator=rate),
    )
    signal = Signal()
    signal.abort()
    calls = Calls()
    with use_context(signal=signal), pytest.raises(OperationAbortedError):
        await run(pipeline, calls, mode)
    assert ran == []
    assert calls.count == 0


@pytest.mark.parametrize("mode", MODES)
async def test_an_abort_during_the_enabled_generator_skips_the_rate_generator(mode: str) -> None:
    """Polly's `Should_not_inject_chaos_when_it_was_cancelled_before_evaluating_strategy`."""
    signal = Signal()
    ran: list[str] = []

    def enabled(_arguments: EnabledGeneratorArguments) -> bool:
        ran.append("enabled")
        signal.abort()
        return True

    def rate(_arguments: InjectionRateGeneratorArguments) -> float:
        ran.append("rate")
        return 1.0

    pipeline = build(
        FakeTimeProvider(),
        chaos_outcome_strategy(outcome=Ok("chaos"), enabled_generator=enabled, injection_rate_generator=rate),
    )
    calls = Calls()
    with use_context(signal=signal), pytest.raises(OperationAbortedError):
        await run(pipeline, calls, mode)
    assert ran == ["enabled"]
    assert calls.count == 0


# -- fault ------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
async def test_fault_raises_a_copy_of_the_fault_each_time(mode: str) -> None:
    """The callable does not run; every injection raises its own copy (its own traceback)."""
    fault = ConnectionError("chaos")
    injected: list[OnFaultInjectedArguments] = []
    options = chaos_fault_strategy(fault=fault, injection_rate=1, on_fault_injected=injected.append)
    pipeline = build(FakeTimeProvider(), options)
    calls = Calls()
    raised = []
    for _ in range(2):
        with pytest.raises(ConnectionError, match="chaos") as info:
            await run(pipeline, calls, mode)
        raised.append(info.value)
    assert calls.count == 0
    assert raised[0] is not raised[1]
    assert fault not in raised
    assert fault.__traceback__ is None
    assert [arguments.fault for arguments in injected] == raised


@pytest.mark.parametrize("mode", MODES)
async def test_fault_class_is_instantiated_per_injection(mode: str) -> None:
    """`fault=SomeError` raises a new `SomeError()` each time."""
    pipeline = build(FakeTimeProvider(), chaos_fault_strategy(fault=TimeoutError, injection_rate=1))
    with pytest.raises(TimeoutError):
        await run(pipeline, Calls(), mode)


@pytest.mark.parametrize("mode", MODES)
async def test_fault_generator_chooses_the_fault_or_none(mode: str) -> None:
    """The generator's exception is raised as is; None injects nothing."""
    made = KeyError("generated")
    faults: list[Exception | None] = [made, None]
    seen: list[FaultGeneratorArguments] = []

    def generate(arguments: FaultGeneratorArguments) -> Any:
        seen.append(arguments)
        return returning(faults.pop(0), mode)(arguments)

    events: list[TelemetryEvent] = []
    pipeline = build(
        FakeTimeProvider(), chaos_fault_strategy(fault_generator=generate, injection_rate=1), events=events
    )
    with use_context(operation_key="op"):
        with pytest.raises(KeyError) as info:
            await run(pipeline, Calls(), mode)
        assert info.value is made
        assert await run(pipeline, Calls(), mode) == "ok"
    assert [arguments.context.operation_key for arguments in seen] == ["op", "op"]
    injected = [event for event in events if event.name == "OnFaultInjected"]
    assert len(injected) == 1
    assert injected[0].severity is Severity.INFORMATION
    assert injected[0].strategy_name == "ChaosFault"
    assert injected[0].operation_key == "op"
    assert injected[0].outcome == Err(made)


@pytest.mark.parametrize("mode", MODES)
async def test_a_fault_generator_returning_nonsense_is_misuse(mode: str) -> None:
    """A generated fault that is not an Exception raises ValidationError."""
    pipeline = build(
        FakeTimeProvider(), chaos_fault_strategy(fault_generator=returning("boom", mode), injection_rate=1)
    )
    with pytest.raises(ValidationError, match="return an Exception instance"):
        await run(pipeline, Calls(), mode)


@pytest.mark.parametrize("mode", MODES)
async def test_async_callbacks_are_awaited(mode: str) -> None:
    """In an async execution an awaitable from `on_fault_injected` is awaited."""
    done: list[str] = []

    async def on_injected(_arguments: OnFaultInjectedArguments) -> None:
        await asyncio.sleep(0)
        done.append("awaited")

    callback = on_injected if mode == "async" else lambda _arguments: done.append("awaited")
    pipeline = build(
        FakeTimeProvider(), chaos_fault_strategy(fault=ValueError, injection_rate=1, on_fault_injected=callback)
    )
    with pytest.raises(ValueError):
        await run(pipeline, Calls(), mode)
    assert done == ["awaited"]


# -- latency ----------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
async def test_latency_waits_on_the_time_provider_then_calls(mode: str) -> None:
    """The callable runs after `latency` seconds of the provider's clock; the event comes first."""
    clock = FakeTimeProvider(auto_advance=True)
    events: list[TelemetryEvent] = []
    injected: list[OnLatencyInjectedArguments] = []
    options = chaos_latency_strategy(
        latency=dt.timedelta(seconds=3), injection_rate=1, on_latency_injected=injected.append
    )
    pipeline = build(clock, options, events=events)
    calls = Calls()
    assert await run(pipeline, calls, mode) == "ok"
    assert calls.count == 1
    assert clock.monotonic() == 3
    assert [arguments.latency for arguments in injected] == [3.0]
    assert [(e.name, e.severity) for e in events if e.strategy_name] == [("OnLatencyInjected", Severity.INFORMATION)]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(
    ("generated", "waited"), [(None, 5.0), (2, 2.0), (dt.timedelta(seconds=1.5), 1.5), (0, 0.0), (-1, 0.0)]
)
async def test_latency_generator(mode: str, generated: object, waited: float) -> None:
    """None keeps `latency`; zero or less injects nothing."""
    clock = FakeTimeProvider(auto_advance=True)
    seen: list[LatencyGeneratorArguments] = []

    def generate(arguments: LatencyGeneratorArguments) -> Any:
        seen.append(arguments)
        return returning(generated, mode)(arguments)

    events: list[TelemetryEvent] = []
    options = chaos_latency_strategy(latency=5, latency_generator=generate, injection_rate=1)
    assert await run(build(clock, options, events=events), Calls(), mode) == "ok"
    assert clock.monotonic() == waited
    assert len(seen) == 1
    assert len([e for e in events if e.name == "OnLatencyInjected"]) == (1 if waited else 0)


@pytest.mark.parametrize("mode", MODES)
async def test_a_latency_generator_returning_nonsense_is_misuse(mode: str) -> None:
    """A generated latency that is not a duration raises ValidationError."""
    options = chaos_latency_strategy(latency=1, latency_generator=returning("slow", mode), injection_rate=1)
    with pytest.raises(ValidationError, match="return seconds"):
        await run(build(FakeTimeProvider(auto_advance=True), options), Calls(), mode)


def test_latency_ends_when_the_signal_aborts_sync() -> None:
    """A sync wait ends at once when the caller's signal aborts; the callable does not run."""
    clock = FakeTimeProvider()
    pipeline = build(clock, chaos_latency_strategy(latency=60, injection_rate=1))
    signal = Signal()
    calls = Calls()
    threading.Timer(0.05, signal.abort).start()
    with use_context(signal=signal), pytest.raises(OperationAbortedError):
        pipeline.execute(calls)
    assert calls.count == 0
    assert clock.monotonic() == 0


async def test_latency_ends_when_the_signal_aborts_async() -> None:
    """An async wait ends at once when the caller's signal aborts; the callable does not run."""
    clock = FakeTimeProvider()
    pipeline = build(clock, chaos_latency_strategy(latency=60, injection_rate=1))
    signal = Signal()
    calls = Calls()
    asyncio.get_running_loop().call_later(0.01, signal.abort)
    with use_context(signal=signal), pytest.raises(OperationAbortedError):
        await run(pipeline, calls, "async")
    assert calls.count == 0
    assert clock.monotonic() == 0


def test_latency_under_the_system_clock_really_waits() -> None:
    """With the real clock the latency is a real (short) wait."""
    pipeline = ResiliencePipelineBuilder().add_chaos_latency(latency=0.02, injection_rate=1).build()
    started = pipeline.time_provider.monotonic()
    assert pipeline.execute(Calls()) == "ok"
    assert pipeline.time_provider.monotonic() - started >= 0.015


# -- outcome ----------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
async def test_outcome_ok_returns_the_value_without_calling(mode: str) -> None:
    """`Ok(v)` stands in for the call's result."""
    injected: list[OnOutcomeInjectedArguments] = []
    options = chaos_outcome_strategy(outcome=Ok(42), injection_rate=1, on_outcome_injected=injected.append)
    calls = Calls()
    assert await run(build(FakeTimeProvider(), options), calls, mode) == 42
    assert calls.count == 0
    assert [arguments.outcome for arguments in injected] == [Ok(42)]


@pytest.mark.parametrize("mode", MODES)
async def test_outcome_err_raises_a_copy(mode: str) -> None:
    """`Err(e)` raises a copy of `e` each time."""
    error = LookupError("chaos")
    pipeline = build(FakeTimeProvider(), chaos_outcome_strategy(outcome=Err(error), injection_rate=1))
    with pytest.raises(LookupError, match="chaos") as info:
        await run(pipeline, Calls(), mode)
    assert info.value is not error


@pytest.mark.parametrize("mode", MODES)
async def test_outcome_generator(mode: str) -> None:
    """The generator's outcome is injected; None calls through; nonsense is misuse."""
    outcomes: list[object] = [Ok("generated"), None, "nonsense"]
    seen: list[OutcomeGeneratorArguments] = []

    def generate(arguments: OutcomeGeneratorArguments) -> Any:
        seen.append(arguments)
        return returning(outcomes.pop(0), mode)(arguments)

    pipeline = build(FakeTimeProvider(), chaos_outcome_strategy(outcome_generator=generate, injection_rate=1))
    assert await run(pipeline, Calls(), mode) == "generated"
    assert await run(pipeline, Calls(), mode) == "ok"
    with pytest.raises(ValidationError, match="return Ok"):
        await run(pipeline, Calls(), mode)
    assert len(seen) == 3


@pytest.mark.parametrize("mode", MODES)
async def test_outcome_injected_event_once_per_injection(mode: str) -> None:
    """One `OnOutcomeInjected` (Information) per injection, with the strategy, pipeline, key and
    injected outcome; an execution the generator lets through reports nothing."""
    outcomes: list[object] = [Ok(42), None, Ok(7)]
    events: list[TelemetryEvent] = []
    injected: list[OnOutcomeInjectedArguments] = []
    order: list[str] = []

    def generate(arguments: OutcomeGeneratorArguments) -> Any:
        return returning(outcomes.pop(0), mode)(arguments)

    def on_injected(arguments: OnOutcomeInjectedArguments) -> None:
        order.append(f"callback after {len([e for e in events if e.name == 'OnOutcomeInjected'])}")
        injected.append(arguments)

    options = chaos_outcome_strategy(
        outcome_generator=generate, injection_rate=1, on_outcome_injected=on_injected, name="Stub"
    )
    pipeline = build(FakeTimeProvider(), options, events=events)
    calls = Calls()
    with use_context(operation_key="op"):
        assert await run(pipeline, calls, mode) == 42
        assert await run(pipeline, calls, mode) == "ok"
        assert await run(pipeline, calls, mode) == 7
    assert calls.count == 1
    reported = [event for event in events if event.name == "OnOutcomeInjected"]
    assert [event.outcome for event in reported] == [Ok(42), Ok(7)]
    assert {event.severity for event in reported} == {Severity.INFORMATION}
    assert {event.strategy_name for event in reported} == {"Stub"}
    assert {event.pipeline_name for event in reported} == {"chaos"}
    assert {event.operation_key for event in reported} == {"op"}
    assert [event.arguments for event in reported] == injected
    assert order == ["callback after 1", "callback after 2"]  # the event comes first


@pytest.mark.parametrize("mode", MODES)
async def test_outcome_injected_event_for_an_injected_error(mode: str) -> None:
    """An injected `Err` is reported with the raised copy as the event's outcome."""
    events: list[TelemetryEvent] = []
    pipeline = build(
        FakeTimeProvider(), chaos_outcome_strategy(outcome=Err(LookupError("chaos")), injection_rate=1), events=events
    )
    with pytest.raises(LookupError) as info:
        await run(pipeline, Calls(), mode)
    [event] = [event for event in events if event.name == "OnOutcomeInjected"]
    assert event.severity is Severity.INFORMATION
    assert event.strategy_name == "ChaosOutcome"
    assert event.outcome == Err(info.value)
    assert isinstance(event.arguments, OnOutcomeInjectedArguments)
    assert event.arguments.outcome == Err(info.value)


# -- behavior ---------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
async def test_behavior_runs_before_the_callable(mode: str) -> None:
    """The event, then `on_behavior_injected`, then the behavior, then the callable."""
    order: list[str] = []
    events: list[TelemetryEvent] = []

    def behavior(arguments: BehaviorGeneratorArguments) -> Any:
        order.append(f"behavior {arguments.context.operation_key}")
        return returning(None, mode)(arguments)

    def on_injected(_arguments: OnBehaviorInjectedArguments) -> None:
        order.append(f"callback after {[e.name for e in events if e.strategy_name]}")

    def work() -> str:
        order.append("callable")
        return "ok"

    options = chaos_behavior_strategy(behavior=behavior, injection_rate=1, on_behavior_injected=on_injected)
    with use_context(operation_key="k"):
        assert await run(build(FakeTimeProvider(), options, events=events), work, mode) == "ok"
    assert order == ["callback after ['OnBehaviorInjected']", "behavior k", "callable"]


@pytest.mark.parametrize("mode", MODES)
async def test_a_failing_behavior_stops_the_execution(mode: str) -> None:
    """An exception from the behavior propagates; the callable does not run."""

    def behavior(_arguments: BehaviorGeneratorArguments) -> None:
        message = "disk full"
        raise OSError(message)

    calls = Calls()
    with pytest.raises(OSError, match="disk full"):
        await run(build(FakeTimeProvider(), chaos_behavior_strategy(behavior=behavior, injection_rate=1)), calls, mode)
    assert calls.count == 0


# -- options ----------------------------------------------------------------------------------


class Uncopyable(Exception):
    """An exception whose constructor needs an argument it does not keep in `args`."""

    def __init__(self, *, code: int) -> None:
        super().__init__()
        self.code = code


def test_build_lists_every_problem() -> None:
    """One ValidationError names every bad option of every chaos strategy."""
    bad: Any = "nope"
    builder = (
        ResiliencePipelineBuilder()
        .add_chaos_fault(injection_rate=1.5)
        .add_chaos_fault(fault=bad, injection_rate=bad, enabled=bad, name="F2")
        .add_chaos_fault(fault=Uncopyable(code=1), name="F3")
        .add_chaos_fault(fault=KeyboardInterrupt, name="F4")
        .add_chaos_latency(latency=-1, injection_rate=math.nan, enabled_generator=bad)
        .add_chaos_outcome()
        .add_chaos_outcome(outcome=bad, outcome_generator=bad, name="O2")
        .add_chaos_outcome(outcome=Err(Uncopyable(code=2)), name="O3")
        .add_chaos_behavior(behavior=bad, on_behavior_injected=bad, injection_rate_generator=bad)
    )
    with pytest.raises(ValidationError) as info:
        builder.build()
    problems = info.value.problems
    assert problems == [
        "ChaosFault.injection_rate: must be from 0 to 1, got 1.5",
        "ChaosFault.fault: give fault or fault_generator",
        "F2.injection_rate: must be a number from 0 to 1, got 'nope'",
        "F2.enabled: must be a bool, got 'nope'",
        "F2.fault: must be an Exception instance or subclass, got 'nope'",
        problems[5],
        "F4.fault: must be an Exception instance or subclass, got <class 'KeyboardInterrupt'>",
        "ChaosLatency.injection_rate: must be from 0 to 1, got nan",
        "ChaosLatency.enabled_generator: must be callable, got 'nope'",
        "ChaosLatency.latency: must be >= 0, got -1",
        "ChaosOutcome.outcome: give outcome or outcome_generator",
        "O2.outcome: must be an Outcome (Ok(value) or Err(exception)), got 'nope'",
        "O2.outcome_generator: must be callable, got 'nope'",
        problems[13],
        "ChaosBehavior.injection_rate_generator: must be callable, got 'nope'",
        "ChaosBehavior.behavior: must be callable, got 'nope'",
        "ChaosBehavior.on_behavior_injected: must be callable, got 'nope'",
    ]
    assert problems[5].startswith("F3.fault: cannot be copied")
    assert problems[13].startswith("O3.outcome: cannot be copied")


def test_shortcuts_equal_the_factories() -> None:
    """Each `add_chaos_*` adds exactly what its factory returns."""

    def behavior(_arguments: BehaviorGeneratorArguments) -> None:
        return None

    builder = (
        ResiliencePipelineBuilder()
        .add_chaos_fault(fault=ValueError, injection_rate=0.2, name="F")
        .add_chaos_latency(latency=1, enabled=False)
        .add_chaos_outcome(outcome=Ok(1), injection_rate=0.5)
        .add_chaos_behavior(behavior=behavior)
    )
    assert builder._strategies == [
        chaos_fault_strategy(fault=ValueError, injection_rate=0.2, name="F"),
        chaos_latency_strategy(latency=1, enabled=False),
        chaos_outcome_strategy(outcome=Ok(1), injection_rate=0.5),
        chaos_behavior_strategy(behavior=behavior),
    ]
    assert builder._strategies[0].injection_rate == 0.2  # type: ignore[union-attr]
    assert [type(s).__name__ for s in builder.build().strategies] == [
        "ChaosFaultStrategy",
        "ChaosOutcomeStrategy",
        "ChaosBehaviorStrategy",
    ]
    assert "rate=0.2" in repr(builder.build().strategies[0])


def test_defaults_follow_polly() -> None:
    """A rate of 0.001 and switched on, as in Polly."""
    options = chaos_fault_strategy(fault=ValueError)
    assert (options.injection_rate, options.enabled, options.name) == (0.001, True, "ChaosFault")
    assert chaos_latency_strategy(latency=1).name == "ChaosLatency"
    assert chaos_outcome_strategy(outcome=Ok(1)).name == "ChaosOutcome"
    assert chaos_behavior_strategy(behavior=print).name == "ChaosBehavior"
