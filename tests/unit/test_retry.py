"""The retry strategy in pipelines: what is retried, when, how often, and what is reported."""

from __future__ import annotations

import asyncio
import datetime as dt
import threading
from typing import TYPE_CHECKING, Any

import pytest

from resilience import (
    Err,
    Ok,
    Outcome,
    ResiliencePipeline,
    ResiliencePipelineBuilder,
    Signal,
    ValidationError,
    get_context,
    use_context,
)
from resilience.telemetry import Severity, TelemetryEvent, TelemetryOptions
from tests.unit.modes import MODES, run

if TYPE_CHECKING:
    from resilience.strategies import OnRetryArguments, RetryDelayArguments
    from resilience.testing import FakeTimeProvider


class Flaky:
    """Fails with the given errors (or returns the given values), then returns "ok"."""

    def __init__(self, clock: FakeTimeProvider, *effects: object) -> None:
        self.clock = clock
        self.effects = list(effects)
        self.times: list[float] = []
        self.attempts: list[int] = []

    def __call__(self) -> object:
        self.times.append(self.clock.monotonic())
        context = get_context()
        assert context is not None
        self.attempts.append(context.attempt)
        if not self.effects:
            return "ok"
        effect = self.effects.pop(0)
        if isinstance(effect, BaseException):
            raise effect
        return effect


def build(clock: FakeTimeProvider, events: list[TelemetryEvent] | None = None, **options: Any) -> ResiliencePipeline:
    telemetry = TelemetryOptions(listeners=[events.append]) if events is not None else None
    return ResiliencePipelineBuilder(time_provider=clock, telemetry=telemetry).add_retry(**options).build()


# -- what is retried --------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
async def test_retries_until_success_with_attempt_numbers(auto_clock: FakeTimeProvider, mode: str) -> None:
    """Each attempt runs under a context whose `attempt` counts from 0."""
    flaky = Flaky(auto_clock, ValueError(), ValueError())
    assert await run(build(auto_clock), flaky, mode) == "ok"
    assert flaky.attempts == [0, 1, 2]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(
    ("backoff", "times"),
    [("constant", [0, 2, 4, 6]), ("linear", [0, 2, 6, 12]), ("exponential", [0, 2, 6, 14])],
)
async def test_exact_delays_between_attempts(
    auto_clock: FakeTimeProvider, mode: str, backoff: str, times: list[int]
) -> None:
    """Attempts start exactly one backoff delay after the previous one ends."""
    flaky = Flaky(auto_clock, *[OSError()] * 3)
    await run(build(auto_clock, backoff=backoff), flaky, mode)
    assert flaky.times == times


@pytest.mark.parametrize("mode", MODES)
async def test_last_exception_reraised_unchanged(auto_clock: FakeTimeProvider, mode: str) -> None:
    """When retries run out, the very last exception object propagates, unwrapped."""
    errors = [KeyError(n) for n in range(4)]
    flaky = Flaky(auto_clock, *errors)
    with pytest.raises(KeyError) as caught:
        await run(build(auto_clock), flaky, mode)
    assert caught.value is errors[3]
    assert len(flaky.times) == 4


@pytest.mark.parametrize("mode", MODES)
async def test_zero_retries_calls_once(auto_clock: FakeTimeProvider, mode: str) -> None:
    """`max_retries=0` makes exactly one call."""
    flaky = Flaky(auto_clock, ValueError())
    with pytest.raises(ValueError):
        await run(build(auto_clock, max_retries=0), flaky, mode)
    assert flaky.attempts == [0]


@pytest.mark.parametrize("mode", MODES)
async def test_unhandled_exception_type_is_not_retried(auto_clock: FakeTimeProvider, mode: str) -> None:
    """`handle=<type>` retries only that type."""
    flaky = Flaky(auto_clock, TypeError())
    with pytest.raises(TypeError):
        await run(build(auto_clock, handle=ValueError), flaky, mode)
    assert flaky.attempts == [0]


@pytest.mark.parametrize("mode", MODES)
async def test_handle_tuple_of_types(auto_clock: FakeTimeProvider, mode: str) -> None:
    """`handle=(A, B)` retries either type."""
    flaky = Flaky(auto_clock, KeyError(), OSError())
    assert await run(build(auto_clock, handle=(KeyError, OSError)), flaky, mode) == "ok"


@pytest.mark.parametrize("mode", MODES)
async def test_validation_error_not_retried_by_default(auto_clock: FakeTimeProvider, mode: str) -> None:
    """The default `handle` is every Exception except `ValidationError`."""
    flaky = Flaky(auto_clock, ValidationError("misuse"))
    with pytest.raises(ValidationError):
        await run(build(auto_clock), flaky, mode)
    assert flaky.attempts == [0]


@pytest.mark.parametrize("mode", MODES)
async def test_predicate_sees_every_outcome_and_ignores_handle_result(auto_clock: FakeTimeProvider, mode: str) -> None:
    """A predicate decides for results and exceptions; `handle_result` is then ignored."""
    seen: list[Outcome[Any]] = []

    def predicate(outcome: Outcome[Any]) -> bool:
        seen.append(outcome)
        return outcome.is_error or outcome.value == "retry-me"

    flaky = Flaky(auto_clock, "retry-me", ValueError())
    pipeline = build(auto_clock, handle=predicate, handle_result=lambda value: True)
    assert await run(pipeline, flaky, mode) == "ok"
    assert [type(o) for o in seen] == [Ok, Err, Ok]


@pytest.mark.parametrize("mode", MODES)
async def test_handle_result_retries_results_and_returns_the_last(auto_clock: FakeTimeProvider, mode: str) -> None:
    """Results matched by `handle_result` are retried; when retries run out the last is returned."""
    flaky = Flaky(auto_clock, 503, 503, 503)
    pipeline = build(auto_clock, max_retries=2, handle_result=lambda status: status == 503)
    assert await run(pipeline, flaky, mode) == 503
    assert flaky.attempts == [0, 1, 2]


class Interrupt(BaseException):
    """A BaseException that is not an Exception."""


@pytest.mark.parametrize("mode", MODES)
async def test_base_exception_is_never_retried(auto_clock: FakeTimeProvider, mode: str) -> None:
    """BaseExceptions that are not Exceptions propagate at once, even with a catch-all predicate."""
    flaky = Flaky(auto_clock, Interrupt())
    with pytest.raises(Interrupt):
        await run(build(auto_clock, handle=lambda outcome: True), flaky, mode)
    assert flaky.attempts == [0]


# -- delays: max_delay, delay_generator, jitter ------------------------------------------------


class Throttled(Exception):
    def __init__(self, retry_after: float | None) -> None:
        super().__init__(retry_after)
        self.retry_after = retry_after


def retry_after(args: RetryDelayArguments) -> float | None:
    error = args.outcome.error
    return error.retry_after if isinstance(error, Throttled) else None


@pytest.mark.parametrize("mode", MODES)
async def test_delay_generator_retry_after(auto_clock: FakeTimeProvider, mode: str) -> None:
    """A generator may honour Retry-After; None falls back to the backoff; max_delay caps it."""
    flaky = Flaky(auto_clock, Throttled(7.0), Throttled(None), Throttled(100.0))
    pipeline = build(auto_clock, delay=1.0, max_delay=30.0, jitter=True, delay_generator=retry_after)
    await run(pipeline, flaky, mode)
    gaps = [b - a for a, b in zip(flaky.times, flaky.times[1:], strict=False)]
    assert gaps[0] == 7.0
    assert 0.75 <= gaps[1] <= 1.25  # the jittered backoff
    assert gaps[2] == 30.0  # the generator's value is capped, not jittered


@pytest.mark.parametrize("mode", MODES)
async def test_delay_generator_gets_the_backoff_and_timedelta_works(auto_clock: FakeTimeProvider, mode: str) -> None:
    """The generator sees the attempt and its backoff delay; a timedelta is seconds; negative is 0."""
    seen: list[tuple[int, float]] = []

    def generator(args: RetryDelayArguments) -> dt.timedelta:
        seen.append((args.attempt, args.backoff_delay))
        return dt.timedelta(seconds=-5 if args.attempt else 3)

    flaky = Flaky(auto_clock, OSError(), OSError())
    await run(build(auto_clock, delay=2.0, backoff="linear", delay_generator=generator), flaky, mode)
    assert seen == [(0, 2.0), (1, 4.0)]
    assert flaky.times == [0.0, 3.0, 3.0]


async def test_async_delay_generator_and_on_retry_are_awaited(auto_clock: FakeTimeProvider) -> None:
    """In an async execution, awaitable callback results are awaited."""
    calls: list[str] = []

    async def generator(args: RetryDelayArguments) -> float:
        calls.append("delay")
        return 0.5

    async def on_retry(args: OnRetryArguments) -> None:
        calls.append("on_retry")

    flaky = Flaky(auto_clock, OSError())
    await run(build(auto_clock, delay_generator=generator, on_retry=on_retry), flaky, "async")
    assert calls == ["delay", "on_retry"]
    assert flaky.times == [0.0, 0.5]


def test_sync_execution_refuses_async_callbacks(auto_clock: FakeTimeProvider) -> None:
    """A sync execution cannot await an async `on_retry`: it says so with a ValidationError."""

    async def on_retry(args: OnRetryArguments) -> None:
        return None

    with pytest.raises(ValidationError, match="execute_async"):
        build(auto_clock, on_retry=on_retry).execute(Flaky(auto_clock, OSError()))


# -- on_retry and telemetry ----------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
async def test_on_retry_arguments(auto_clock: FakeTimeProvider, mode: str) -> None:
    """`on_retry` gets the failed attempt's outcome, context, number, next delay and duration."""
    seen: list[OnRetryArguments] = []
    error = OSError("down")

    def slow_failure() -> None:
        auto_clock.sleep(0.25)
        raise error

    calls = iter([slow_failure, lambda: "ok"])

    def call_next() -> object:
        return next(calls)()

    pipeline = build(auto_clock, delay=1.5, on_retry=seen.append)
    assert await run(pipeline, call_next, mode) == "ok"
    [args] = seen
    assert args.outcome == Err(error)
    assert args.attempt == 0
    assert args.context.attempt == 0
    assert args.delay == 1.5
    assert args.duration == 0.25


@pytest.mark.parametrize("mode", MODES)
async def test_events_and_severities(auto_clock: FakeTimeProvider, mode: str) -> None:
    """ExecutionAttempt is Warning when retried, Error on the last handled failure; OnRetry is Warning."""
    events: list[TelemetryEvent] = []
    flaky = Flaky(auto_clock, OSError(), OSError())
    with pytest.raises(OSError):
        await run(build(auto_clock, events, max_retries=1), flaky, mode)
    mine = [(e.name, e.severity) for e in events if e.strategy_name == "Retry"]
    assert mine == [
        ("ExecutionAttempt", Severity.WARNING),
        ("OnRetry", Severity.WARNING),
        ("ExecutionAttempt", Severity.ERROR),
    ]
    attempts = [e.arguments for e in events if e.name == "ExecutionAttempt"]
    assert [(a.attempt, a.handled) for a in attempts] == [(0, True), (1, True)]  # type: ignore[union-attr]


@pytest.mark.parametrize("mode", MODES)
async def test_success_and_unhandled_attempts_are_information(auto_clock: FakeTimeProvider, mode: str) -> None:
    """A success, or an unhandled failure, is an Information attempt and is not retried."""
    events: list[TelemetryEvent] = []
    await run(build(auto_clock, events), lambda: 1, mode)
    with pytest.raises(TypeError):
        await run(build(auto_clock, events, handle=ValueError), Flaky(auto_clock, TypeError()), mode)
    attempts = [e for e in events if e.name == "ExecutionAttempt"]
    assert [e.severity for e in attempts] == [Severity.INFORMATION, Severity.INFORMATION]
    assert [e.arguments.handled for e in attempts] == [False, False]  # type: ignore[union-attr]


# -- the signal ------------------------------------------------------------------------------------


def test_abort_during_sync_sleep_stops_retrying(clock: FakeTimeProvider) -> None:
    """A sleep between attempts ends when the signal aborts; the last exception is raised."""
    signal = Signal()
    errors = [OSError(0), OSError(1)]
    flaky = Flaky(clock, *errors)
    outcome: list[object] = []

    def worker() -> None:
        with use_context(signal=signal):
            try:
                build(clock, delay=60).execute(flaky)
            except OSError as exc:
                outcome.append(exc)

    thread = threading.Thread(target=worker)
    thread.start()
    while clock.pending_timers == 0:  # the retry is asleep
        threading.Event().wait(0.001)
    signal.abort()
    thread.join(5)
    assert outcome == [errors[0]]
    assert flaky.attempts == [0]
    assert clock.monotonic() == 0.0


async def test_abort_during_async_sleep_stops_retrying(clock: FakeTimeProvider) -> None:
    """An async retry sleep wakes at once on abort and makes no further attempt."""
    signal = Signal()
    errors = [OSError(0), OSError(1)]
    flaky = Flaky(clock, *errors)

    async def abort_soon() -> None:
        while clock.pending_timers == 0:
            await asyncio.sleep(0)
        signal.abort()

    with use_context(signal=signal):
        aborter = asyncio.ensure_future(abort_soon())
        with pytest.raises(OSError) as caught:
            await run(build(clock, delay=60), flaky, "async")
        await aborter
    assert caught.value is errors[0]
    assert flaky.attempts == [0]


@pytest.mark.parametrize("mode", MODES)
async def test_abort_inside_attempt_prevents_the_retry(auto_clock: FakeTimeProvider, mode: str) -> None:
    """A signal that aborted during an attempt means no retry: the last outcome is returned/raised."""
    signal = Signal()

    def fail_and_abort() -> None:
        signal.abort()
        raise OSError

    with use_context(signal=signal), pytest.raises(OSError):
        await run(build(auto_clock), fail_and_abort, mode)
    assert auto_clock.monotonic() == 0.0


@pytest.mark.parametrize("mode", MODES)
async def test_attempt_signal_is_a_child_of_the_callers(auto_clock: FakeTimeProvider, mode: str) -> None:
    """Each attempt gets its own child signal that follows the caller's."""
    signal = Signal()
    seen: list[Signal] = []

    def record() -> str:
        context = get_context()
        assert context is not None
        seen.append(context.signal)
        if len(seen) == 1:
            raise OSError
        return "ok"

    with use_context(signal=signal):
        await run(build(auto_clock), record, mode)
    assert len({id(s) for s in seen}) == 2
    assert signal not in seen


@pytest.mark.parametrize("mode", MODES)
async def test_aborted_signal_never_starts_the_callable(auto_clock: FakeTimeProvider, mode: str) -> None:
    """Under an already aborted signal the callable never runs; the signal's reason is raised."""
    signal = Signal()
    reason = RuntimeError("stop")
    signal.abort(reason)
    flaky = Flaky(auto_clock)
    with use_context(signal=signal), pytest.raises(RuntimeError) as caught:
        await run(build(auto_clock), flaky, mode)
    assert caught.value is reason
    assert flaky.attempts == []


async def test_attempt_events_go_to_the_log_without_listeners(
    auto_clock: FakeTimeProvider, caplog: pytest.LogCaptureFixture
) -> None:
    """With no listener, an enabled logger still gets attempts, with measured durations."""
    import logging

    def slow() -> str:
        auto_clock.sleep(0.5)
        return "ok"

    with caplog.at_level(logging.INFO, logger="resilience"):
        build(auto_clock).execute(slow)
    [record] = [r for r in caplog.records if r.__dict__.get("event.name") == "ExecutionAttempt"]
    assert record.__dict__["attempt.duration"] == 0.5
