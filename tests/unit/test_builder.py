import pytest

from resilience import PipelineBuilder, ResiliencePipelineBuilder, SystemTimeProvider, ValidationError
from resilience._time import SYSTEM_TIME
from resilience.telemetry import TelemetryOptions
from resilience.testing import FakeTimeProvider


def test_add_returns_the_same_builder() -> None:
    """add() appends and returns the builder itself, for chaining."""
    builder = ResiliencePipelineBuilder()
    from tests.unit.test_custom_strategies import Recorder

    assert builder.add(Recorder("r", [])) is builder
    assert isinstance(builder, PipelineBuilder)


def test_build_collects_every_problem_at_once() -> None:
    """One ValidationError lists each problem of the builder and of every strategy."""
    from tests.unit.test_custom_strategies import RecorderOptions

    builder = (
        PipelineBuilder(name="", time_provider=object(), telemetry={"listeners": []})  # type: ignore[arg-type]
        .add(RecorderOptions([], name="First", depth=-1))
        .add(RecorderOptions([], name="Second", depth=-2))
        .add("not a strategy")  # type: ignore[arg-type]
    )
    with pytest.raises(ValidationError) as info:
        builder.build()
    problems = info.value.problems
    assert problems[0].startswith("Pipeline.name: must be a non-empty string")
    assert any(p.startswith("Pipeline.time_provider: must implement TimeProvider") for p in problems)
    assert any(p.startswith("Pipeline.telemetry: must be a TelemetryOptions") for p in problems)
    assert "First.depth: must be >= 0, got -1" in problems
    assert "Second.depth: must be >= 0, got -2" in problems
    assert any(p.startswith("Pipeline.strategies[2]: must be strategy options or a Strategy") for p in problems)
    assert len(problems) == 6
    assert isinstance(info.value, ValueError)


def test_build_can_be_called_many_times_with_fresh_state() -> None:
    """Each build() creates new strategies from the same options."""
    from tests.unit.test_custom_strategies import RecorderOptions

    log: list[str] = []
    builder = PipelineBuilder().add(RecorderOptions(log))
    first, second = builder.build(), builder.build()
    assert first is not second
    assert first.strategies[0] is not second.strategies[0]


def test_the_default_clock_is_the_process_wide_system_clock() -> None:
    """Without a time_provider a pipeline uses the SystemTimeProvider singleton."""
    assert PipelineBuilder().build().time_provider is SYSTEM_TIME
    assert isinstance(SYSTEM_TIME, SystemTimeProvider)
    clock = FakeTimeProvider()
    assert PipelineBuilder(time_provider=clock).build().time_provider is clock
    assert PipelineBuilder(telemetry=TelemetryOptions()).build().name is None
