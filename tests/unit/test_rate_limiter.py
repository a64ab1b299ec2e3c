"""The rate limiter strategy: options, partitions, waiting, rejection, events, sync and async."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import threading
from typing import Any

import pytest

from resilience import (
    OperationAbortedError,
    RateLimiterRejectedError,
    ResilienceContext,
    ResiliencePipelineBuilder,
    Signal,
    ValidationError,
    is_rejection,
    use_context,
)
from resilience.limiters import MemoryRateLimitStore
from resilience.strategies import (
    OnRateLimiterRejectedArguments,
    RateLimiterStrategyOptions,
    rate_limiter_strategy,
)
from resilience.telemetry import Severity, TelemetryOptions
from resilience.testing import FakeTimeProvider, capture_events


def work() -> str:
    return "done"


async def awork() -> str:
    return "done"


class SyncOnlyStore:
    """A third-party store with only the sync protocol, counting its calls."""

    def __init__(self, answers: list[float]) -> None:
        self.answers = answers
        self.calls: list[tuple[object, ...]] = []

    def take(  # noqa: PLR0917
        self, key: str, limit: int, per: float, burst: int | None = None, algorithm: str = "", permits: int = 1
    ) -> float:
        self.calls.append((key, limit, per, burst, algorithm, permits))
        return self.answers.pop(0)


class AsyncOnlyStore:
    """A third-party store with only the asyncio protocol."""

    def __init__(self, answers: list[float]) -> None:
        self.answers = answers
        self.calls: list[tuple[object, ...]] = []

    async def take_async(  # noqa: PLR0917
        self, key: str, limit: int, per: float, burst: int | None = None, algorithm: str = "", permits: int = 1
    ) -> float:
        self.calls.append((key, limit, per, burst, algorithm, permits))
        return self.answers.pop(0)


def _problems(limit: object = 10, **options: object) -> list[str]:
    with pytest.raises(ValidationError) as caught:
        ResiliencePipelineBuilder().add_rate_limiter(limit, **options).build()  # type: ignore[arg-type]
    return caught.value.problems


# -- options ------------------------------------------------------------------------------------


def test_factory_records_and_defaults() -> None:
    """rate_limiter_strategy() only records; defaults as documented; the options are frozen."""
    options = rate_limiter_strategy(5)
    assert isinstance(options, RateLimiterStrategyOptions)
    assert (options.limit, options.per, options.burst, options.algorithm, options.key) == (
        5,
        1.0,
        None,
        "token_bucket",
        "",
    )
    assert (options.store, options.wait, options.on_rejected, options.name) == (None, 0.0, None, "RateLimiter")
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.limit = 3  # type: ignore[misc]


@pytest.mark.parametrize(
    ("limit", "options", "problem"),
    [
        (0, {}, "RateLimiter.limit: must be >= 1"),
        (1.5, {}, "RateLimiter.limit: must be an int"),
        (True, {}, "RateLimiter.limit: must be an int"),
        (10, {"per": 0}, "RateLimiter.per: must be > 0"),
        (10, {"per": float("inf")}, "RateLimiter.per: must be finite"),
        (10, {"burst": 0}, "RateLimiter.burst: must be >= 1"),
        (10, {"burst": 5, "algorithm": "fixed_window"}, "RateLimiter.burst: applies to the token bucket only"),
        (10, {"algorithm": "leaky_bucket"}, "RateLimiter.algorithm: must be one of"),
        (10, {"key": 3}, "RateLimiter.key: must be a str or a callable"),
        (10, {"store": object()}, "RateLimiter.store: must implement RateLimitStore"),
        (10, {"store": MemoryRateLimitStore(FakeTimeProvider())}, "RateLimiter.store: a MemoryRateLimitStore must"),
        (10, {"wait": -1}, "RateLimiter.wait: must be >= 0"),
        (10, {"on_rejected": 3}, "RateLimiter.on_rejected: must be callable"),
        (10, {"name": ""}, ".name: must be a non-empty string"),
    ],
)
def test_each_bad_option_is_named(limit: object, options: dict[str, Any], problem: str) -> None:
    """build() names every bad option."""
    problems = _problems(limit, **options)
    assert any(p.startswith(problem) for p in problems), problems


def test_every_problem_at_once() -> None:
    """Several bad options: one ValidationError listing all of them."""
    assert len(_problems(0, per=-1, wait=-1, name="")) == 4


def test_durations_accept_timedelta() -> None:
    """per and wait take a timedelta."""
    clock = FakeTimeProvider()
    pipeline = (
        ResiliencePipelineBuilder(time_provider=clock)
        .add_rate_limiter(1, per=dt.timedelta(seconds=2), wait=dt.timedelta(seconds=0))
        .build()
    )
    assert pipeline.execute(work) == "done"
    with pytest.raises(RateLimiterRejectedError) as caught:
        pipeline.execute(work)
    assert caught.value.retry_after == pytest.approx(2.0)


# -- behaviour ----------------------------------------------------------------------------------


def test_rejects_with_exact_retry_after_and_never_runs_the_callable() -> None:
    """Token bucket 2/s: two run, the third is rejected with retry_after 0.5 and never runs."""
    clock = FakeTimeProvider()
    pipeline = ResiliencePipelineBuilder(time_provider=clock).add_rate_limiter(2, key="api").build()
    ran: list[int] = []
    assert pipeline.execute(lambda: ran.append(1)) is None
    assert pipeline.execute(lambda: ran.append(2)) is None
    with pytest.raises(RateLimiterRejectedError) as caught:
        pipeline.execute(lambda: ran.append(3))
    error = caught.value
    assert (error.key, error.retry_after) == ("api", pytest.approx(0.5))
    assert is_rejection(error)
    assert ran == [1, 2]
    clock.advance(0.5)
    assert pipeline.execute(work) == "done"


def test_key_function_partitions_the_limit() -> None:
    """Each tenant gets its own limit; the key function sees the execution's context."""
    clock = FakeTimeProvider()
    seen: list[ResilienceContext] = []

    def tenant(context: ResilienceContext) -> str:
        seen.append(context)
        return f"tenant:{context.operation_key}"

    pipeline = ResiliencePipelineBuilder(time_provider=clock).add_rate_limiter(1, per=60, key=tenant).build()
    with use_context(operation_key="a"):
        pipeline.execute(work)
        with pytest.raises(RateLimiterRejectedError) as caught:
            pipeline.execute(work)
    assert caught.value.key == "tenant:a"
    with use_context(operation_key="b"):
        assert pipeline.execute(work) == "done"
    assert [c.operation_key for c in seen] == ["a", "a", "b"]


def test_key_function_must_return_a_str() -> None:
    """A key function returning something else is misuse."""
    pipeline = ResiliencePipelineBuilder().add_rate_limiter(1, key=lambda _ctx: 42).build()  # type: ignore[arg-type,return-value]
    with pytest.raises(ValidationError, match=r"RateLimiter\.key: the key function returned 42"):
        pipeline.execute(work)


def test_each_build_has_its_own_limits_but_a_store_is_shared() -> None:
    """Without a store each build() starts full; with a store, builds share it."""
    clock = FakeTimeProvider()
    builder = ResiliencePipelineBuilder(time_provider=clock).add_rate_limiter(1, per=60)
    first, second = builder.build(), builder.build()
    first.execute(work)
    assert second.execute(work) == "done"
    store = MemoryRateLimitStore(clock)
    builder = ResiliencePipelineBuilder(time_provider=clock).add_rate_limiter(1, per=60, store=store)
    builder.build().execute(work)
    with pytest.raises(RateLimiterRejectedError):
        builder.build().execute(work)


@pytest.mark.parametrize("algorithm", ["token_bucket", "sliding_window", "fixed_window"])
def test_each_algorithm_runs_through_the_strategy(algorithm: Any) -> None:
    """Every algorithm admits `limit` then rejects with the time left."""
    clock = FakeTimeProvider()
    pipeline = ResiliencePipelineBuilder(time_provider=clock).add_rate_limiter(3, per=3, algorithm=algorithm).build()
    for _ in range(3):
        pipeline.execute(work)
    with pytest.raises(RateLimiterRejectedError) as caught:
        pipeline.execute(work)
    assert caught.value.retry_after == pytest.approx(1.0 if algorithm == "token_bucket" else 3.0)


def test_wait_sleeps_the_retry_after_then_runs() -> None:
    """With wait, a caller sleeps exactly the retry-after (on the time provider) and runs."""
    clock = FakeTimeProvider(auto_advance=True)
    pipeline = ResiliencePipelineBuilder(time_provider=clock).add_rate_limiter(4, wait=1.0).build()
    for _ in range(4):
        pipeline.execute(work)
    started = clock.monotonic()
    assert pipeline.execute(work) == "done"
    assert clock.monotonic() - started == pytest.approx(0.25)


def test_wait_too_short_rejects_at_once() -> None:
    """A retry-after beyond the time left to wait rejects without sleeping."""
    clock = FakeTimeProvider(auto_advance=True)
    pipeline = ResiliencePipelineBuilder(time_provider=clock).add_rate_limiter(1, per=10, wait=5).build()
    pipeline.execute(work)
    with pytest.raises(RateLimiterRejectedError) as caught:
        pipeline.execute(work)
    assert caught.value.retry_after == pytest.approx(10.0)
    assert clock.monotonic() == 0.0


def test_wait_retries_when_a_competitor_took_the_permit() -> None:
    """A store that refuses again after the wait makes the strategy wait again, within `wait`."""
    clock = FakeTimeProvider(auto_advance=True)
    store = SyncOnlyStore([0.3, 0.3, 0.0])
    pipeline = ResiliencePipelineBuilder(time_provider=clock).add_rate_limiter(5, store=store, wait=1).build()
    assert pipeline.execute(work) == "done"
    assert clock.monotonic() == pytest.approx(0.6)
    assert store.calls[0] == ("", 5, 1.0, None, "token_bucket", 1)
    store = SyncOnlyStore([0.6, 0.6])
    pipeline = ResiliencePipelineBuilder(time_provider=clock).add_rate_limiter(5, store=store, wait=1).build()
    with pytest.raises(RateLimiterRejectedError) as caught:
        pipeline.execute(work)
    assert caught.value.retry_after == 0.6
    assert len(store.calls) == 2


def test_wait_ends_when_the_signal_aborts() -> None:
    """An aborted caller stops waiting at once and fails with its signal's reason."""
    clock = FakeTimeProvider()
    pipeline = ResiliencePipelineBuilder(time_provider=clock).add_rate_limiter(1, per=10, wait=60).build()
    pipeline.execute(work)
    signal = Signal()
    failure: list[BaseException] = []

    def run() -> None:
        with use_context(signal=signal):
            try:
                pipeline.execute(work)
            except BaseException as exc:
                failure.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    deadline = 100
    while clock.pending_timers == 0 and deadline:
        threading.Event().wait(0.01)
        deadline -= 1
    signal.abort()
    thread.join(10)
    assert len(failure) == 1
    assert isinstance(failure[0], OperationAbortedError)


def test_rejection_event_and_callback() -> None:
    """OnRateLimiterRejected (Error) carries the key and retry-after; on_rejected gets the same."""
    clock = FakeTimeProvider()
    received: list[OnRateLimiterRejectedArguments] = []
    pipeline = (
        ResiliencePipelineBuilder(name="api", time_provider=clock)
        .add_rate_limiter(1, per=2, key="k", on_rejected=received.append, name="Limit")
        .build()
    )
    pipeline.execute(work)
    with capture_events() as events, use_context(operation_key="op"), pytest.raises(RateLimiterRejectedError):
        pipeline.execute(work)
    rejected = [e for e in events if e.name == "OnRateLimiterRejected"]
    assert len(rejected) == 1
    event = rejected[0]
    assert (event.severity, event.pipeline_name, event.strategy_name, event.operation_key) == (
        Severity.ERROR,
        "api",
        "Limit",
        "op",
    )
    assert event.arguments is received[0]
    assert (received[0].key, received[0].retry_after) == ("k", pytest.approx(2.0))
    assert received[0].context.operation_key == "op"


def test_on_rejected_exception_propagates() -> None:
    """An exception from on_rejected replaces the rejection (as for every callback)."""

    def boom(_args: OnRateLimiterRejectedArguments) -> None:
        raise KeyError("boom")

    pipeline = ResiliencePipelineBuilder(time_provider=FakeTimeProvider()).add_rate_limiter(1, on_rejected=boom).build()
    pipeline.execute(work)
    with pytest.raises(KeyError):
        pipeline.execute(work)


def test_listener_sees_the_event_through_telemetry_options() -> None:
    """A TelemetryOptions listener receives the rejection too."""
    seen: list[str] = []
    pipeline = (
        ResiliencePipelineBuilder(
            time_provider=FakeTimeProvider(), telemetry=TelemetryOptions(listeners=[lambda e: seen.append(e.name)])
        )
        .add_rate_limiter(1)
        .build()
    )
    pipeline.execute(work)
    with pytest.raises(RateLimiterRejectedError):
        pipeline.execute(work)
    assert "OnRateLimiterRejected" in seen


# -- async --------------------------------------------------------------------------------------


async def test_async_rejects_and_waits() -> None:
    """The async twin: reject with the exact retry-after; with wait, sleep it and run."""
    clock = FakeTimeProvider(auto_advance=True)
    received: list[OnRateLimiterRejectedArguments] = []

    async def on_rejected(args: OnRateLimiterRejectedArguments) -> None:
        received.append(args)

    pipeline = ResiliencePipelineBuilder(time_provider=clock).add_rate_limiter(2, on_rejected=on_rejected).build()
    await pipeline.execute_async(awork)
    await pipeline.execute_async(awork)
    with pytest.raises(RateLimiterRejectedError) as caught:
        await pipeline.execute_async(awork)
    assert caught.value.retry_after == pytest.approx(0.5)
    assert len(received) == 1
    waiting = ResiliencePipelineBuilder(time_provider=clock).add_rate_limiter(2, wait=1).build()
    for _ in range(3):
        assert await waiting.execute_async(awork) == "done"
    assert clock.monotonic() == pytest.approx(0.5)


async def test_async_wait_ends_when_the_signal_aborts() -> None:
    """An aborted caller stops waiting and fails with the reason."""
    clock = FakeTimeProvider()
    pipeline = ResiliencePipelineBuilder(time_provider=clock).add_rate_limiter(1, per=10, wait=60).build()
    await pipeline.execute_async(awork)
    signal = Signal()

    async def run() -> str:
        with use_context(signal=signal):
            return await pipeline.execute_async(awork)

    task = asyncio.ensure_future(run())
    await asyncio.sleep(0.01)
    signal.abort()
    with pytest.raises(OperationAbortedError):
        await asyncio.wait_for(task, 10)


async def test_async_store_is_awaited_and_a_sync_execution_is_refused() -> None:
    """An async-only store serves execute_async; execute raises ValidationError naming the fix."""
    clock = FakeTimeProvider(auto_advance=True)
    store = AsyncOnlyStore([0.0, 0.2, 0.0])
    pipeline = ResiliencePipelineBuilder(time_provider=clock).add_rate_limiter(3, store=store, wait=1).build()
    assert await pipeline.execute_async(awork) == "done"
    assert await pipeline.execute_async(awork) == "done"
    assert clock.monotonic() == pytest.approx(0.2)
    with pytest.raises(ValidationError, match="has no sync client"):
        pipeline.execute(work)


async def test_sync_only_store_refuses_an_async_execution() -> None:
    """A sync-only store in an async execution is misuse, reported before anything runs."""
    pipeline = ResiliencePipelineBuilder().add_rate_limiter(3, store=SyncOnlyStore([])).build()  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match="has no asyncio client"):
        await pipeline.execute_async(awork)


def test_repr_names_the_limit() -> None:
    """The built strategy's repr says what it limits."""
    pipeline = ResiliencePipelineBuilder().add_rate_limiter(7, per=2, key="k").build()
    assert "limit=7" in repr(pipeline.strategies[0])


def test_error_message_and_pickle() -> None:
    """The error names the key and retry-after, and pickles with its attributes."""
    import pickle

    error = RateLimiterRejectedError("tenant:1", 0.25)
    assert "tenant:1" in str(error)
    assert "0.25" in str(error)
    copy = pickle.loads(pickle.dumps(error))
    assert (copy.key, copy.retry_after, str(copy)) == ("tenant:1", 0.25, str(error))
    assert "retry" not in str(RateLimiterRejectedError("k"))
