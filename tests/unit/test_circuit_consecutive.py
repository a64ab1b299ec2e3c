"""The consecutive-failures circuit: opens after n handled failures in a row (pybreaker's `fail_max`)."""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING, Any

import pytest

from resilience import BrokenCircuitError, ResiliencePipeline, ResiliencePipelineBuilder, ValidationError
from resilience.strategies import CircuitState, OnCircuitOpenedArguments
from resilience.telemetry import TelemetryEvent, TelemetryOptions
from tests.unit.modes import MODES, run

if TYPE_CHECKING:
    from resilience.testing import FakeTimeProvider


def build(clock: FakeTimeProvider, events: list[TelemetryEvent] | None = None, **options: Any) -> ResiliencePipeline:
    telemetry = TelemetryOptions(listeners=[events.append]) if events is not None else None
    options.setdefault("consecutive_failures", 3)
    return (
        ResiliencePipelineBuilder(time_provider=clock, telemetry=telemetry)
        .add_circuit_breaker(handle=ConnectionError, break_duration=5.0, **options)
        .build()
    )


def fail() -> None:
    raise ConnectionError("down")


def ok() -> str:
    return "ok"


def state(pipeline: ResiliencePipeline) -> CircuitState:
    return pipeline.strategies[0].state  # type: ignore[attr-defined, no-any-return]


async def outcome(pipeline: ResiliencePipeline, fn: Any, mode: str) -> str:
    try:
        await run(pipeline, fn, mode)
    except ConnectionError:
        return "F"
    except BrokenCircuitError:
        return "B"
    except ValueError:
        return "U"
    return "ok"


@pytest.mark.parametrize("mode", MODES)
async def test_the_pybreaker_sequence_opens_on_the_third_failure_in_a_row(clock: FakeTimeProvider, mode: str) -> None:
    """`F F ok F F ok F F F F` with 3 in a row: open after call 9, call 10 is rejected (pybreaker's
    `fail_max=3` opens at call 9; the ratio breaker opened at call 5)."""
    pipeline = build(clock)
    seen = [await outcome(pipeline, fail if step == "F" else ok, mode) for step in "FFoFFoFFFF"]
    assert seen == ["F", "F", "ok", "F", "F", "ok", "F", "F", "F", "B"]
    assert state(pipeline) is CircuitState.OPEN


@pytest.mark.parametrize("mode", MODES)
async def test_an_unhandled_failure_counts_as_a_success(clock: FakeTimeProvider, mode: str) -> None:
    """As in the ratio breaker, an outcome `handle` does not handle ends the run of failures."""

    def unhandled() -> None:
        raise ValueError("not a connection problem")

    pipeline = build(clock)
    seen = [await outcome(pipeline, step, mode) for step in (fail, fail, unhandled, fail, fail, ok)]
    assert seen == ["F", "F", "U", "F", "F", "ok"]
    assert state(pipeline) is CircuitState.CLOSED


@pytest.mark.parametrize("mode", MODES)
async def test_break_probe_and_a_fresh_count_after_closing(clock: FakeTimeProvider, mode: str) -> None:
    """The break, the single probe and the events are the ratio breaker's; closing starts the count anew."""
    events: list[TelemetryEvent] = []
    opened: list[OnCircuitOpenedArguments] = []
    pipeline = build(clock, events, consecutive_failures=2, on_opened=opened.append)
    assert [await outcome(pipeline, fail, mode) for _ in range(3)] == ["F", "F", "B"]
    assert opened[0].break_duration == 5.0
    opening = next(event for event in events if event.name == "OnCircuitOpened")
    assert opening.arguments is opened[0]
    clock.advance(4.9)
    assert await outcome(pipeline, ok, mode) == "B"
    clock.advance(0.1)
    assert await outcome(pipeline, fail, mode) == "F"  # the probe failed: open again
    assert state(pipeline) is CircuitState.OPEN
    clock.advance(5.0)
    assert await outcome(pipeline, ok, mode) == "ok"  # the probe succeeded: closed
    assert state(pipeline) is CircuitState.CLOSED
    assert await outcome(pipeline, fail, mode) == "F"  # one failure after closing: not two in a row
    assert state(pipeline) is CircuitState.CLOSED
    assert await outcome(pipeline, fail, mode) == "F"
    assert state(pipeline) is CircuitState.OPEN


def test_one_failure_is_enough_with_one(clock: FakeTimeProvider) -> None:
    pipeline = build(clock, consecutive_failures=1)
    with pytest.raises(ConnectionError):
        pipeline.execute(fail)
    assert state(pipeline) is CircuitState.OPEN


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"consecutive_failures": 0}, "consecutive_failures"),
        ({"consecutive_failures": True}, "consecutive_failures"),
        ({"consecutive_failures": 2.0}, "consecutive_failures"),
        ({"failure_ratio": 0.5}, "failure_ratio"),
        ({"minimum_throughput": 10}, "minimum_throughput"),
        ({"sampling_duration": 10}, "sampling_duration"),
    ],
)
def test_options_of_the_ratio_are_refused_beside_it(
    clock: FakeTimeProvider, options: dict[str, Any], named: str
) -> None:
    with pytest.raises(ValidationError, match=named):
        build(clock, **options)


def test_the_ratio_options_at_their_defaults_are_accepted(clock: FakeTimeProvider) -> None:
    pipeline = build(clock, failure_ratio=0.1, minimum_throughput=100, sampling_duration=dt.timedelta(seconds=30))
    assert state(pipeline) is CircuitState.CLOSED
