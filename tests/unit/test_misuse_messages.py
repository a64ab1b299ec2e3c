"""Mistakes a newcomer makes get a short message that says what to do instead."""

from __future__ import annotations

import asyncio
import datetime as dt
import functools
import logging

import pytest
import redis
import redis.asyncio

from resilience import (
    BrokenCircuitError,
    Err,
    ResiliencePipelineBuilder,
    ValidationError,
)
from resilience.stores import MemoryLockStore, MemorySemaphoreStore
from resilience.strategies import CircuitBreakerManualControl
from resilience.strategies.lock import _key as _lock_key


async def fetch() -> str:
    return "async"


def _broken_pipeline() -> ResiliencePipelineBuilder:
    control = CircuitBreakerManualControl()
    control.isolate()
    return ResiliencePipelineBuilder().add_retry(max_retries=2, delay=0).add_circuit_breaker(manual_control=control)


def test_a_redis_client_as_store_names_the_store_to_pass_without_its_repr() -> None:
    """`store=redis.Redis()` says: pass `RedisLockStore(client)`, in one short line."""
    with pytest.raises(ValidationError) as caught:
        ResiliencePipelineBuilder().add_lock("k", store=redis.Redis()).build()  # type: ignore[arg-type]
    (problem,) = caught.value.problems
    assert "pass RedisLockStore(client)" in problem
    assert "redis.client.Redis" in problem
    assert len(problem) < 200


def test_an_asyncio_redis_client_as_store_names_the_async_client_keyword() -> None:
    """The asyncio client goes to `async_client=`."""
    with pytest.raises(ValidationError) as caught:
        ResiliencePipelineBuilder().add_lock("k", store=redis.asyncio.Redis()).build()  # type: ignore[arg-type]
    assert "RedisLockStore(async_client=client)" in caught.value.problems[0]


def test_another_object_as_store_names_its_type_not_its_repr() -> None:
    """Anything else that is no lock store is named by its type."""

    class Huge:
        def __repr__(self) -> str:
            return "x" * 900

    with pytest.raises(ValidationError) as caught:
        ResiliencePipelineBuilder().add_lock("k", store=Huge()).build()  # type: ignore[arg-type]
    (problem,) = caught.value.problems
    assert problem.startswith("Lock.store: must implement LockStore or AsyncLockStore, got tests.unit.")
    assert problem.endswith("<locals>.Huge")
    assert "xxx" not in problem


def test_a_negative_timedelta_is_reported_in_seconds() -> None:
    """`timedelta(seconds=-5)` reads as -5 seconds, not as days=-1, seconds=86395."""
    with pytest.raises(ValidationError) as caught:
        ResiliencePipelineBuilder().add_lock("k", ttl=dt.timedelta(seconds=-5)).build()
    assert caught.value.problems == ["Lock.ttl: must be >= 0.001 seconds, got timedelta(seconds=-5)"]


@pytest.mark.parametrize("strategies", [False, True])
def test_execute_none_is_a_validation_error(*, strategies: bool) -> None:
    """`execute(None)` says the first argument must be a callable, with or without strategies."""
    builder = ResiliencePipelineBuilder()
    if strategies:
        builder.add_retry(max_retries=3, delay=0)
    with pytest.raises(ValidationError, match="execute: the first argument must be a callable, got NoneType"):
        builder.build().execute(None)  # type: ignore[arg-type]


def test_a_type_error_inside_the_callable_is_not_mistaken_for_misuse() -> None:
    """Only a non-callable becomes a ValidationError; a TypeError the call raises propagates."""
    pipeline = ResiliencePipelineBuilder().build()
    with pytest.raises(TypeError, match="unsupported operand"):
        pipeline.execute(lambda: 1 + "1")  # type: ignore[operator]


@pytest.mark.parametrize("strategies", [False, True])
async def test_execute_async_none_is_a_validation_error(*, strategies: bool) -> None:
    """The async twin says the same."""
    builder = ResiliencePipelineBuilder()
    if strategies:
        builder.add_timeout(1)
    with pytest.raises(ValidationError, match="execute_async: the first argument must be a callable"):
        await builder.build().execute_async(None)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="unsupported operand"):
        await builder.build().execute_async(lambda: 1 + "1")  # type: ignore[arg-type, operator]


def test_settle_none_returns_the_validation_error() -> None:
    """`settle` never raises an Exception: the misuse is an `Err` holding a ValidationError."""
    outcome = ResiliencePipelineBuilder().build().settle(None)  # type: ignore[arg-type]
    assert isinstance(outcome, Err)
    assert isinstance(outcome.error, ValidationError)
    assert "must be a callable" in str(outcome.error)


@pytest.mark.parametrize(
    "fn",
    [fetch, functools.partial(fetch), type("Caller", (), {"__call__": fetch})()],
    ids=["coroutine function", "partial", "async __call__"],
)
def test_an_async_callable_in_execute_is_refused_before_an_open_circuit(fn: object) -> None:
    """An open circuit would hide the mistake behind BrokenCircuitError: the check comes first."""
    pipeline = _broken_pipeline().build()
    with pytest.raises(ValidationError, match="is an async function: run it with execute_async"):
        pipeline.execute(fn)  # type: ignore[arg-type]
    with pytest.raises(BrokenCircuitError):
        pipeline.execute(lambda: "sync")  # the circuit is open indeed


def test_the_decorator_refuses_a_non_callable() -> None:
    """Decorating something that cannot be called says so at once."""
    with pytest.raises(ValidationError, match="the decorator: the first argument must be a callable"):
        ResiliencePipelineBuilder().build()(42)  # type: ignore[call-overload]


def test_the_default_store_is_logged_once_at_build_at_info(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without `store=`, `build()` says once (INFO, no warning) that the lock is local to this process."""
    monkeypatch.setattr(_lock_key, "_noted_default_store", False)
    with caplog.at_level(logging.INFO, logger="resilience"):
        ResiliencePipelineBuilder().add_lock("a").build()
        ResiliencePipelineBuilder().add_lock("b").build()
        ResiliencePipelineBuilder().add_lock("c", store=MemoryLockStore()).build()
    records = [r for r in caplog.records if "no store= given" in r.getMessage()]
    assert len(records) == 1
    assert records[0].levelno == logging.INFO
    assert "this process only" in records[0].getMessage()
    assert "RedisLockStore" in records[0].getMessage()


def test_a_given_store_logs_nothing(caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    """With a store, nothing is said: a lock's, or a store-backed concurrency limiter's."""
    monkeypatch.setattr(_lock_key, "_noted_default_store", False)
    with caplog.at_level(logging.DEBUG, logger="resilience"):
        ResiliencePipelineBuilder().add_lock("c", store=MemoryLockStore()).build()
        ResiliencePipelineBuilder().add_concurrency_limiter(2, key="k", store=MemorySemaphoreStore()).build()
    assert not [r for r in caplog.records if "no store= given" in r.getMessage()]


def test_running_an_async_function_still_works_where_it_belongs() -> None:
    """The up-front check does not get in the way of `execute_async`."""
    pipeline = ResiliencePipelineBuilder().add_retry(max_retries=1, delay=0).build()
    assert asyncio.run(pipeline.execute_async(fetch)) == "async"


# -- a builder where a pipeline belongs ------------------------------------------------------


def test_a_builder_used_as_a_decorator_asks_for_build() -> None:
    builder = ResiliencePipelineBuilder().add_retry()
    with pytest.raises(ValidationError, match=r"did you forget \.build\(\)\?"):

        @builder  # type: ignore[arg-type]
        def job() -> None: ...


def test_a_builder_given_to_the_http_transports_asks_for_build() -> None:
    from resilience.http import AsyncResilientTransport, ResilientTransport
    from resilience.http.requests import ResilientHTTPAdapter

    builder = ResiliencePipelineBuilder().add_retry()
    for kind in (ResilientTransport, AsyncResilientTransport, ResilientHTTPAdapter):
        with pytest.raises(ValidationError, match=r"did you forget \.build\(\)\?") as caught:
            kind(builder)  # type: ignore[arg-type]
        assert str(caught.value).startswith(f"{kind.__name__}: pipeline: got a ResiliencePipelineBuilder")
    with pytest.raises(ValidationError, match="must be a ResiliencePipeline"):
        ResilientTransport("pipeline")  # type: ignore[arg-type]


# -- a redis client where a store belongs ----------------------------------------------------


@pytest.mark.parametrize(
    ("add", "line"),
    [
        (lambda b, c: b.add_rate_limiter(10, per=1, store=c), "pass RedisRateLimitStore(client)"),
        (lambda b, c: b.add_concurrency_limiter(3, store=c), "pass RedisSemaphoreStore(client)"),
        (lambda b, c: b.add_circuit_breaker(state_store=c, circuit_key="k"), "pass RedisCircuitStateStore(client)"),
    ],
    ids=["rate-limiter", "concurrency-limiter", "circuit"],
)
def test_a_redis_client_as_any_store_names_the_store_to_pass(add: object, line: str) -> None:
    """As the lock does: the store to wrap the client in, its import, and no 400-character repr."""
    client = redis.Redis()
    with pytest.raises(ValidationError) as caught:
        add(ResiliencePipelineBuilder(), client).build()  # type: ignore[operator]
    (problem,) = caught.value.problems
    assert line in problem
    assert "got a redis client (redis.client.Redis)" in problem
    assert len(problem) < 200
    client.close()
