"""Functions that report failures as values: `execute_outcome`, and `Outcome.value_or` / `map`."""

from __future__ import annotations

import asyncio

import pytest

from resilience import Err, Ok, Outcome, ResiliencePipelineBuilder, ValidationError
from resilience.strategies import CircuitBreakerStateProvider, CircuitState
from resilience.testing import capture_events


def test_value_or_gives_the_value_or_the_default() -> None:
    """`Ok(v).value_or(d)` is v; `Err(e).value_or(d)` is d."""
    assert Ok(3).value_or(0) == 3
    assert Err(ValueError("x")).value_or(0) == 0
    assert Ok(None).value_or(5) is None  # a None value is a value


def test_map_transforms_a_value_and_passes_an_error_through() -> None:
    """`map` applies to `Ok` only; an `Err` comes back as it is, `fn` not called."""
    assert Ok(2).map(lambda v: v * 10) == Ok(20)
    error = Err(ValueError("x"))
    called: list[object] = []
    assert error.map(called.append) is error
    assert called == []


def test_mapped_outcomes_still_work_with_match_statements() -> None:
    """The conveniences leave pattern matching as it was."""
    outcome: Ok[int] | Err = Ok(2).map(lambda v: v + 1)
    match outcome:
        case Ok(value):
            assert value == 3
        case Err():
            pytest.fail("not an error")


def test_an_err_returned_is_retried_like_an_exception_raised() -> None:
    """Polly's ExecuteOutcome: `Err(e)` is handled by retry exactly like `raise e`."""
    pipeline = ResiliencePipelineBuilder().add_retry(max_retries=2, delay=0, handle=ConnectionError).build()
    attempts: list[int] = []

    def charge(amount: int) -> Ok[int] | Err:
        attempts.append(amount)
        if len(attempts) < 3:
            return Err(ConnectionError("reset"))
        return Ok(amount)

    with capture_events() as events:
        assert pipeline.execute_outcome(charge, 5) == Ok(5)
    assert attempts == [5, 5, 5]
    assert [e.name for e in events].count("OnRetry") == 2


def test_when_retries_run_out_the_last_err_is_returned_not_raised() -> None:
    """The final failure comes back as the `Err`, holding the very error returned."""
    pipeline = ResiliencePipelineBuilder().add_retry(max_retries=1, delay=0, handle=ConnectionError).build()
    errors = [ConnectionError("one"), ConnectionError("two")]
    outcome = pipeline.execute_outcome(lambda: Err(errors.pop(0)))
    assert isinstance(outcome, Err)
    assert str(outcome.error) == "two"


def test_errs_count_as_failures_for_the_circuit_breaker() -> None:
    """Returned errors open the circuit like raised ones."""
    state = CircuitBreakerStateProvider()
    pipeline = (
        ResiliencePipelineBuilder()
        .add_circuit_breaker(failure_ratio=0.5, minimum_throughput=2, state_provider=state)
        .build()
    )
    for _ in range(2):
        pipeline.execute_outcome(lambda: Err(OSError("down")))
    assert state.state is CircuitState.OPEN
    assert isinstance(pipeline.execute_outcome(lambda: Ok(1)).error, Exception)  # rejected, as an Err


def test_an_exception_raised_is_settled_too() -> None:
    """A raising function also ends as an `Err`; nothing is raised."""

    def boom() -> Ok[int]:
        raise KeyError("k")

    assert isinstance(ResiliencePipelineBuilder().build().execute_outcome(boom).error, KeyError)


def test_a_function_that_returns_no_outcome_is_a_validation_error() -> None:
    """Returning a bare value is a mistake, reported (as an `Err`) with what to return instead."""
    outcome = ResiliencePipelineBuilder().build().execute_outcome(lambda: 42)  # type: ignore[arg-type, return-value]
    assert isinstance(outcome.error, ValidationError)
    assert "not an Outcome: return Ok(value) or Err(error)" in str(outcome.error)


def test_an_async_function_in_execute_outcome_is_refused() -> None:
    """The sync form refuses an async function before running anything."""

    async def fetch() -> Ok[int]:
        return Ok(1)

    outcome = ResiliencePipelineBuilder().build().execute_outcome(fetch)  # type: ignore[arg-type]
    assert isinstance(outcome.error, ValidationError)
    assert "execute_async" in str(outcome.error)


def test_a_sync_function_returning_an_awaitable_is_refused_and_closed() -> None:
    """A `def` that returns a coroutine gets the sync execution's awaitable message."""

    async def fetch() -> Ok[int]:
        return Ok(1)

    def looks_sync() -> Ok[int]:
        return fetch()  # type: ignore[return-value]

    outcome = ResiliencePipelineBuilder().build().execute_outcome(looks_sync)
    assert isinstance(outcome.error, ValidationError)
    assert "returned an awaitable" in str(outcome.error)


async def test_the_async_twin_handles_errs_the_same_way() -> None:
    """`execute_outcome_async` awaits the function and retries a returned `Err`."""
    pipeline = ResiliencePipelineBuilder().add_retry(max_retries=1, delay=0, handle=TimeoutError).build()
    calls: list[int] = []

    async def quote() -> Outcome[str]:
        await asyncio.sleep(0)
        calls.append(1)
        return Err(TimeoutError()) if len(calls) == 1 else Ok("42")

    assert await pipeline.execute_outcome_async(quote) == Ok("42")
    assert len(calls) == 2


async def test_the_async_twin_refuses_non_callables_non_awaitables_and_non_outcomes() -> None:
    """Each misuse comes back as an `Err(ValidationError)` naming it."""
    pipeline = ResiliencePipelineBuilder().build()
    outcome = await pipeline.execute_outcome_async(None)  # type: ignore[arg-type]
    assert "must be a callable" in str(outcome.error)
    outcome = await pipeline.execute_outcome_async(lambda: Ok(1))  # type: ignore[arg-type, return-value]
    assert "not an awaitable" in str(outcome.error)

    async def bare() -> int:
        return 1

    outcome = await pipeline.execute_outcome_async(bare)  # type: ignore[arg-type]
    assert "not an Outcome" in str(outcome.error)
