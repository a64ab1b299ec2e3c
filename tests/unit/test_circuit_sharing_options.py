"""The sharing options of the circuit breaker: validated at build(), with one problem each."""

from __future__ import annotations

import datetime as dt

import pytest

from resilience import PipelineBuilder, ResiliencePipelineBuilder, ValidationError
from resilience._time import SYSTEM_TIME
from resilience.stores import RedisCircuitStateStore
from resilience.strategies import StrategyBuildContext, circuit_breaker_strategy
from resilience.telemetry._source import TelemetrySource


class _NotARedis:
    """A stand-in that is never called: validation fails before anything connects."""


def _store() -> RedisCircuitStateStore:
    return RedisCircuitStateStore(lambda: pytest.fail("validation must not connect"))


def problems(builder: PipelineBuilder) -> list[str]:
    with pytest.raises(ValidationError) as caught:
        builder.build()
    return caught.value.problems


def test_a_state_store_must_be_a_circuit_state_store() -> None:
    """A lock store or any other object is refused by name."""
    found = problems(ResiliencePipelineBuilder(name="p").add_circuit_breaker(state_store=_NotARedis()))  # type: ignore[arg-type]
    assert len(found) == 1
    assert found[0].startswith("CircuitBreaker.state_store: must be a RedisCircuitStateStore, got ")


@pytest.mark.parametrize("interval", [0, -1, float("nan"), True, "0.1"])
def test_sync_interval_must_be_a_positive_duration(interval: object) -> None:
    """`sync_interval` follows the duration rules, > 0."""
    builder = PipelineBuilder(name="p").add(circuit_breaker_strategy(state_store=_store(), sync_interval=interval))  # type: ignore[arg-type]
    found = problems(builder)
    assert len(found) == 1
    assert found[0].startswith("CircuitBreaker.sync_interval: ")


def test_circuit_key_rules() -> None:
    """A key must be non-empty text, needs a store, and a nameless pipeline needs one."""
    assert problems(ResiliencePipelineBuilder(name="p").add_circuit_breaker(circuit_key="")) == [
        "CircuitBreaker.circuit_key: must be a non-empty str, got ''"
    ]
    assert problems(ResiliencePipelineBuilder(name="p").add_circuit_breaker(circuit_key="k")) == [
        "CircuitBreaker.circuit_key: needs a state_store (a circuit without one is not shared)"
    ]
    found = problems(ResiliencePipelineBuilder().add_circuit_breaker(state_store=_store()))
    assert found == [
        "CircuitBreaker.circuit_key: give one, or name the pipeline: the default is '<pipeline name>/<name>'"
    ]


def test_the_default_key_is_pipeline_slash_strategy_name() -> None:
    """`circuit_key` defaults to "<pipeline name>/<strategy name>"; timedelta intervals are accepted."""
    options = circuit_breaker_strategy(state_store=_store(), sync_interval=dt.timedelta(milliseconds=50), name="cb")
    assert options.circuit_key is None
    assert options.sync_interval == dt.timedelta(milliseconds=50)
    context = StrategyBuildContext(
        pipeline_name="orders", pipeline_instance=None, time_provider=SYSTEM_TIME, telemetry=TelemetrySource(None)
    )
    assert list(options.validate(context)) == []
    assert options.shared_key(context) == "orders/cb"


def test_a_break_duration_generator_is_refused_with_a_state_store() -> None:
    """The fleet's break is `break_duration`: a generator would only apply while Redis is down."""
    builder = ResiliencePipelineBuilder(name="p").add_circuit_breaker(
        state_store=_store(), break_duration_generator=lambda _arguments: 0.3
    )
    expected = (
        "CircuitBreaker.break_duration_generator: cannot be used with a state_store: "
        "a shared circuit's break is break_duration, for the whole fleet"
    )
    assert problems(builder) == [expected]
