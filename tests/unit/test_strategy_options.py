"""Options objects: immutable, validated only at build(), every problem reported at once."""

from __future__ import annotations

import dataclasses
import datetime as dt
import inspect
from typing import Any

import pytest

import resilience.strategies
from resilience import PipelineBuilder, ResiliencePipelineBuilder, ValidationError
from resilience.strategies import (
    CircuitBreakerStrategyOptions,
    ExecutionAttemptArguments,
    OnRetryArguments,
    RetryStrategyOptions,
    TimeoutStrategyOptions,
    circuit_breaker_strategy,
    retry_strategy,
    timeout_strategy,
)


def problems(options: Any) -> list[str]:
    with pytest.raises(ValidationError) as caught:
        PipelineBuilder().add(options).build()
    return caught.value.problems


def test_strategies_all_is_sorted_and_complete() -> None:
    """`resilience.strategies.__all__` is sorted and every name resolves."""
    names = resilience.strategies.__all__
    assert names == sorted(names)
    assert all(hasattr(resilience.strategies, name) for name in names)


def test_factories_return_frozen_options_with_defaults() -> None:
    """The factories return immutable options carrying DESIGN §2.6's defaults."""
    retry = retry_strategy()
    assert (retry.max_retries, retry.delay, retry.backoff, retry.jitter, retry.max_delay, retry.name) == (
        3,
        2.0,
        "constant",
        False,
        None,
        "Retry",
    )
    timeout = timeout_strategy()
    assert (timeout.timeout, timeout.name) == (30.0, "Timeout")
    breaker = circuit_breaker_strategy()
    assert (
        breaker.failure_ratio,
        breaker.minimum_throughput,
        breaker.sampling_duration,
        breaker.break_duration,
        breaker.name,
    ) == (0.1, 100, 30.0, 5.0, "CircuitBreaker")
    for options in (retry, timeout, breaker):
        with pytest.raises(dataclasses.FrozenInstanceError):
            options.name = "x"  # type: ignore[misc]


def test_arguments_are_frozen_and_slotted() -> None:
    """Arguments classes are frozen, slotted dataclasses."""
    args = ExecutionAttemptArguments(attempt=1, duration=0.5, handled=True)
    with pytest.raises(dataclasses.FrozenInstanceError):
        args.attempt = 2  # type: ignore[misc]
    assert not hasattr(args, "__dict__")
    assert "__slots__" in vars(OnRetryArguments)


def test_shortcuts_equal_the_factories() -> None:
    """`add_retry(...)` etc. add exactly what the factories return."""

    def hook(args: object) -> None:
        return None

    builder = (
        ResiliencePipelineBuilder()
        .add_retry(max_retries=1, delay=0.1, backoff="linear", on_retry=hook)
        .add_timeout(3, on_timeout=hook)
        .add_circuit_breaker(failure_ratio=0.5, minimum_throughput=10, on_opened=hook)
    )
    assert builder._strategies == [
        retry_strategy(max_retries=1, delay=0.1, backoff="linear", on_retry=hook),
        timeout_strategy(3, on_timeout=hook),
        circuit_breaker_strategy(failure_ratio=0.5, minimum_throughput=10, on_opened=hook),
    ]


def test_nothing_is_validated_before_build() -> None:
    """Bad options are accepted by the factories and refused by build()."""
    options = retry_strategy(max_retries=-1)
    assert isinstance(options, RetryStrategyOptions)
    assert problems(options) == ["Retry.max_retries: must be >= 0, got -1"]


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        ({"max_retries": True}, "Retry.max_retries: must be an int"),
        ({"max_retries": 1.5}, "Retry.max_retries: must be an int"),
        ({"delay": -1}, "Retry.delay: must be >= 0"),
        ({"delay": float("nan")}, "Retry.delay: must be a number, got NaN"),
        ({"delay": float("inf")}, "Retry.delay: must be finite"),
        ({"delay": True}, "Retry.delay: must be a duration"),
        ({"max_delay": "1"}, "Retry.max_delay: must be a duration"),
        ({"backoff": "fibonacci"}, "Retry.backoff: must be one of 'constant', 'linear', 'exponential'"),
        ({"backoff": 1}, "Retry.backoff: must be one of"),
        ({"jitter": 1}, "Retry.jitter: must be a bool"),
        ({"handle": KeyboardInterrupt}, "Retry.handle: must be an Exception subclass"),
        ({"handle": (ValueError, 3)}, "Retry.handle: a tuple must hold only Exception subclasses"),
        ({"handle": 3}, "Retry.handle: must be an exception type, a tuple of them, or a predicate"),
        ({"handle_result": 1}, "Retry.handle_result: must be callable"),
        ({"delay_generator": 1}, "Retry.delay_generator: must be callable"),
        ({"on_retry": "x"}, "Retry.on_retry: must be callable"),
    ],
)
def test_retry_validation(options: dict[str, Any], expected: str) -> None:
    """Each bad retry option is reported as `Retry.<option>: <what>`."""
    [problem] = problems(RetryStrategyOptions(**options))
    assert problem.startswith(expected)


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        ({"timeout": 0}, "Timeout.timeout: must be > 0"),
        ({"timeout": -1.0}, "Timeout.timeout: must be > 0"),
        ({"timeout": float("inf")}, "Timeout.timeout: must be finite"),
        ({"timeout": False}, "Timeout.timeout: must be a duration"),
        ({"timeout_generator": 5}, "Timeout.timeout_generator: must be callable"),
        ({"on_timeout": 5}, "Timeout.on_timeout: must be callable"),
    ],
)
def test_timeout_validation(options: dict[str, Any], expected: str) -> None:
    """Each bad timeout option is reported as `Timeout.<option>: <what>`."""
    [problem] = problems(TimeoutStrategyOptions(**options))
    assert problem.startswith(expected)


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        ({"failure_ratio": 0}, "CircuitBreaker.failure_ratio: must be > 0 and <= 1"),
        ({"failure_ratio": 1.5}, "CircuitBreaker.failure_ratio: must be > 0 and <= 1"),
        ({"failure_ratio": float("nan")}, "CircuitBreaker.failure_ratio: must be > 0 and <= 1"),
        ({"failure_ratio": True}, "CircuitBreaker.failure_ratio: must be a number"),
        ({"failure_ratio": "0.5"}, "CircuitBreaker.failure_ratio: must be a number"),
        ({"minimum_throughput": 1}, "CircuitBreaker.minimum_throughput: must be >= 2"),
        ({"minimum_throughput": 2.0}, "CircuitBreaker.minimum_throughput: must be an int"),
        ({"sampling_duration": 0}, "CircuitBreaker.sampling_duration: must be > 0"),
        ({"break_duration": dt.timedelta(0)}, "CircuitBreaker.break_duration: must be > 0"),
        ({"break_duration_generator": 1}, "CircuitBreaker.break_duration_generator: must be callable"),
        ({"handle": SystemExit}, "CircuitBreaker.handle: must be an Exception subclass"),
        ({"manual_control": object()}, "CircuitBreaker.manual_control: must be a CircuitBreakerManualControl"),
        ({"state_provider": object()}, "CircuitBreaker.state_provider: must be a CircuitBreakerStateProvider"),
        ({"on_opened": 1}, "CircuitBreaker.on_opened: must be callable"),
        ({"on_closed": 1}, "CircuitBreaker.on_closed: must be callable"),
        ({"on_half_opened": 1}, "CircuitBreaker.on_half_opened: must be callable"),
    ],
)
def test_circuit_breaker_validation(options: dict[str, Any], expected: str) -> None:
    """Each bad breaker option is reported as `CircuitBreaker.<option>: <what>`."""
    [problem] = problems(CircuitBreakerStrategyOptions(**options))
    assert problem.startswith(expected)


def test_empty_name_is_reported() -> None:
    """An empty name is a problem too (the prefix is then empty)."""
    assert problems(retry_strategy(name="")) == [".name: must be a non-empty string, got ''"]


def test_every_problem_of_every_strategy_at_once() -> None:
    """One ValidationError lists the problems of all strategies, prefixed by each name."""
    builder = (
        ResiliencePipelineBuilder()
        .add_retry(max_retries=-1, delay=-1, name="R")
        .add_timeout(0)
        .add_circuit_breaker(minimum_throughput=0)
    )
    with pytest.raises(ValidationError) as caught:
        builder.build()
    assert [p.split(":")[0] for p in caught.value.problems] == [
        "R.max_retries",
        "R.delay",
        "Timeout.timeout",
        "CircuitBreaker.minimum_throughput",
    ]


def test_reprs_name_the_strategy() -> None:
    """Built strategies have informative reprs."""
    pipeline = ResiliencePipelineBuilder().add_retry().add_timeout(2).add_circuit_breaker().build()
    assert [repr(s) for s in pipeline.strategies] == [
        "<RetryStrategy max_retries=3>",
        "<TimeoutStrategy timeout=2>",
        "<CircuitBreakerStrategy state=CLOSED>",
    ]


FACTORIES = [
    getattr(resilience.strategies, name) for name in resilience.strategies.__all__ if name.endswith("_strategy")
]


@pytest.mark.parametrize("factory", FACTORIES, ids=lambda factory: factory.__name__)
def test_each_factory_declares_exactly_its_options_fields(factory: Any) -> None:
    """A factory's parameters are its options class's fields (names, positional order, defaults), each passed through."""
    parameters = inspect.signature(factory).parameters
    sentinels = {name: object() for name in parameters}
    positional = [sentinels[name] for name, p in parameters.items() if p.kind is p.POSITIONAL_ONLY]
    options = factory(
        *positional,
        **{n: v for n, v in sentinels.items() if parameters[n].kind is not inspect.Parameter.POSITIONAL_ONLY},
    )
    fields = dataclasses.fields(options)
    leading = [name for name, p in parameters.items() if p.kind is p.POSITIONAL_ONLY]
    assert [field.name for field in fields][: len(leading)] == leading  # the rest are keyword-only: any order
    assert sorted(field.name for field in fields) == sorted(parameters)
    for field in fields:
        assert getattr(options, field.name) is sentinels[field.name], field.name
        declared = parameters[field.name].default
        if field.default is dataclasses.MISSING:
            assert declared is inspect.Parameter.empty, field.name
        else:
            assert declared == field.default, field.name


@pytest.mark.parametrize("factory", FACTORIES, ids=lambda factory: factory.__name__)
def test_each_shortcut_is_its_factory_with_the_same_signature_and_documentation(factory: Any) -> None:
    """`add_x` takes `x_strategy`'s parameters and shows its documentation in `help()`."""
    shortcut = getattr(ResiliencePipelineBuilder, "add_" + factory.__name__.removesuffix("_strategy"))
    builder = ResiliencePipelineBuilder()
    assert list(inspect.signature(getattr(builder, shortcut.__name__)).parameters.values()) == list(
        inspect.signature(factory).parameters.values()
    )
    assert factory.__doc__ in shortcut.__doc__
