import dataclasses
import logging

import pytest

from resilience import Ok, PipelineBuilder, PipelineExecutedArguments
from resilience.telemetry import Severity, TelemetryEvent, TelemetryOptions
from resilience.telemetry._source import TelemetrySource
from resilience.testing import FakeTimeProvider


def test_events_are_frozen_and_slotted() -> None:
    """A TelemetryEvent cannot be changed."""
    event = TelemetryEvent("E", Severity.WARNING, "p", "i", "s", "k", None, None)
    with pytest.raises(dataclasses.FrozenInstanceError):
        event.name = "other"  # type: ignore[misc]
    assert not hasattr(event, "__dict__")


def test_listeners_receive_pipeline_events_in_order() -> None:
    """Listeners get PipelineExecuting then PipelineExecuted with outcome and duration."""
    events: list[TelemetryEvent] = []
    clock = FakeTimeProvider(auto_advance=True)
    pipeline = PipelineBuilder(
        name="orders", instance_name="eu-1", time_provider=clock, telemetry=TelemetryOptions(listeners=[events.append])
    ).build()

    def work() -> int:
        clock.sleep(2)
        return 7

    assert pipeline.execute(work) == 7
    assert [e.name for e in events] == ["PipelineExecuting", "PipelineExecuted"]
    executing, executed = events
    assert executing.severity is Severity.DEBUG
    assert executed.severity is Severity.INFORMATION
    assert (executed.pipeline_name, executed.pipeline_instance, executed.strategy_name) == ("orders", "eu-1", None)
    assert executed.outcome == Ok(7)
    assert isinstance(executed.arguments, PipelineExecutedArguments)
    assert executed.arguments.duration == 2
    assert "duration=2" in repr(executed.arguments)


async def test_async_executions_emit_the_same_events() -> None:
    """The async path emits the same pair, with an Err outcome on failure."""
    events: list[TelemetryEvent] = []
    pipeline = PipelineBuilder(telemetry=TelemetryOptions(listeners=[events.append])).build()

    async def fail() -> None:
        raise ValueError("x")

    with pytest.raises(ValueError):
        await pipeline.execute_async(fail)

    async def ok() -> int:
        return 1

    assert await pipeline.execute_async(ok) == 1
    assert [e.name for e in events] == ["PipelineExecuting", "PipelineExecuted"] * 2
    assert events[1].outcome is not None
    assert isinstance(events[1].outcome.error, ValueError)


def test_a_sync_failure_is_reported_with_its_error() -> None:
    """PipelineExecuted carries the exception as an Err outcome."""
    events: list[TelemetryEvent] = []
    pipeline = PipelineBuilder(telemetry=TelemetryOptions(listeners=[events.append])).build()
    with pytest.raises(ZeroDivisionError):
        pipeline.execute(lambda: 1 / 0)
    assert events[-1].outcome is not None
    assert isinstance(events[-1].outcome.error, ZeroDivisionError)


def test_severity_none_suppresses_everywhere(caplog: pytest.LogCaptureFixture) -> None:
    """A severity provider returning NONE keeps the event from listeners and logs alike."""
    events: list[TelemetryEvent] = []

    def provider(event: TelemetryEvent) -> Severity:
        return Severity.NONE if event.name == "PipelineExecuting" else Severity.CRITICAL

    pipeline = PipelineBuilder(
        telemetry=TelemetryOptions(listeners=[events.append], severity_provider=provider)
    ).build()
    with caplog.at_level(logging.DEBUG, logger="resilience"):
        pipeline.execute(lambda: None)
    assert [(e.name, e.severity) for e in events] == [("PipelineExecuted", Severity.CRITICAL)]
    assert "PipelineExecuting" not in caplog.text
    assert [r.levelno for r in caplog.records] == [logging.CRITICAL]


def test_a_failing_listener_or_provider_is_logged_not_raised(caplog: pytest.LogCaptureFixture) -> None:
    """Telemetry never breaks an execution: failures are logged."""

    def bad_listener(event: TelemetryEvent) -> None:
        raise RuntimeError("listener")

    def bad_provider(event: TelemetryEvent) -> Severity:
        raise RuntimeError("provider")

    pipeline = PipelineBuilder(
        telemetry=TelemetryOptions(listeners=[bad_listener], severity_provider=bad_provider)
    ).build()
    assert pipeline.execute(lambda: 5) == 5
    assert "a telemetry listener raised" in caplog.text
    assert "the severity provider raised" in caplog.text


def test_log_records_carry_the_event_fields(caplog: pytest.LogCaptureFixture) -> None:
    """One record per event on logger 'resilience', at the mapped level, fields as extra (dotted, as in spans)."""
    pipeline = PipelineBuilder(name="logs").build()
    with caplog.at_level(logging.DEBUG, logger="resilience"):
        pipeline.execute(lambda: None)
        with pytest.raises(KeyError):
            pipeline.execute(lambda: {}["missing"])
    records = [r for r in caplog.records if r.name == "resilience"]
    assert [(r.levelno, r.__dict__["event.name"]) for r in records] == [
        (logging.DEBUG, "PipelineExecuting"),
        (logging.INFO, "PipelineExecuted"),
        (logging.DEBUG, "PipelineExecuting"),
        (logging.INFO, "PipelineExecuted"),
    ]
    last = records[-1]
    assert last.__dict__["pipeline.name"] == "logs"
    assert last.__dict__["event.severity"] == "Information"
    assert last.__dict__["error.type"] == last.__dict__["exception.type"] == "KeyError"
    assert "PipelineExecuted" in last.getMessage()
    assert "logs" in last.getMessage()
    assert "KeyError" in last.getMessage()


def test_nothing_is_built_when_nobody_listens() -> None:
    """With no listener, provider or enabled logger, emit() returns NONE and builds nothing."""
    source = TelemetrySource(pipeline_name="quiet", strategy_name="S")
    assert source.emit("OnLockAcquired", Severity.DEBUG) is Severity.NONE
    assert not source.enabled(Severity.DEBUG)
    assert source.for_strategy("T").strategy_name == "T"


def test_severity_maps_to_logging_levels() -> None:
    """Each severity has a stdlib level; NONE is above all of them."""
    assert Severity.DEBUG.log_level == logging.DEBUG
    assert Severity.INFORMATION.log_level == logging.INFO
    assert Severity.WARNING.log_level == logging.WARNING
    assert Severity.ERROR.log_level == logging.ERROR
    assert Severity.CRITICAL.log_level == logging.CRITICAL
    assert Severity.NONE.log_level > logging.CRITICAL
    assert logging.getLogger("resilience").handlers


def test_a_provider_returning_a_non_severity_keeps_the_default(caplog: pytest.LogCaptureFixture) -> None:
    """A severity provider that returns something else is logged; the event keeps its default severity."""
    events: list[TelemetryEvent] = []
    listeners = [events.append]
    options = TelemetryOptions(listeners=listeners, severity_provider=lambda e: "Warning")  # type: ignore[arg-type,return-value]
    listeners.append(lambda e: None)  # the options took a copy
    pipeline = PipelineBuilder(telemetry=options).build()
    assert pipeline.execute(lambda: 5) == 5
    assert [e.severity for e in events] == [Severity.DEBUG, Severity.INFORMATION]
    assert "not a Severity" in caplog.text
    assert isinstance(options.listeners, tuple)
    assert len(options.listeners) == 1
