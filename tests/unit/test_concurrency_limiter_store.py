"""The store-backed concurrency limiter: each permit a lease on a semaphore store, as a lock's."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest

from resilience import (
    RateLimiterRejectedError,
    ResiliencePipelineBuilder,
    SemaphoreLeaseLostError,
    ValidationError,
    get_lock_token,
)
from resilience.stores import MemoryLockStore, MemorySemaphoreStore
from resilience.strategies import OnRateLimiterRejectedArguments
from resilience.testing import FakeTimeProvider, capture_events
from tests.unit.lockkit import idle

TTL = 3.0


def _until(predicate: Any, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "not reached in time"
        time.sleep(0.005)


@pytest.mark.parametrize(
    ("options", "problem"),
    [
        ({"store": MemoryLockStore()}, "ConcurrencyLimiter.store: must implement SemaphoreStore"),
        ({"store": object()}, "ConcurrencyLimiter.store: must implement SemaphoreStore"),
        ({"store": MemorySemaphoreStore(FakeTimeProvider())}, "ConcurrencyLimiter.store: a MemorySemaphoreStore must"),
        (
            {"store": MemorySemaphoreStore(), "queue": 2, "wait": 1},
            "ConcurrencyLimiter.queue: applies to the in-process",
        ),
    ],
)
def test_store_options_are_checked(options: dict[str, Any], problem: str) -> None:
    """A lock store, a foreign object, a store on another clock, or a queue with a store: named."""
    with pytest.raises(ValidationError) as caught:
        ResiliencePipelineBuilder().add_concurrency_limiter(2, **options).build()
    assert any(p.startswith(problem) for p in caught.value.problems), caught.value.problems


def test_wait_without_queue_is_fine_with_a_store() -> None:
    """With a store, `wait` alone is how long a caller waits in the store's order."""
    ResiliencePipelineBuilder().add_concurrency_limiter(2, store=MemorySemaphoreStore(), wait=5).build()


def test_limit_holders_each_with_a_fencing_token_then_reject() -> None:
    """Two permits held at once with distinct tokens; the third is rejected with the lease time left."""
    clock = FakeTimeProvider()
    store = MemorySemaphoreStore(clock)
    received: list[OnRateLimiterRejectedArguments] = []
    pipeline = (
        ResiliencePipelineBuilder(time_provider=clock)
        .add_concurrency_limiter(2, key="reports", store=store, ttl=TTL, on_rejected=received.append)
        .build()
    )
    inside = threading.Barrier(3)
    leave = threading.Event()
    tokens: list[int | None] = []

    def hold() -> None:
        tokens.append(get_lock_token())
        inside.wait(10)
        leave.wait(10)

    threads = [threading.Thread(target=pipeline.execute, args=(hold,)) for _ in range(2)]
    for thread in threads:
        thread.start()
    inside.wait(10)
    with capture_events() as events, pytest.raises(RateLimiterRejectedError) as caught:
        pipeline.execute(lambda: None)
    assert caught.value.key == "reports"
    assert caught.value.retry_after == pytest.approx(TTL)
    assert [r.key for r in received] == ["reports"]
    assert [e.name for e in events if e.name.startswith("On")] == ["OnRateLimiterRejected"]
    leave.set()
    for thread in threads:
        thread.join(10)
    assert len(set(tokens)) == 2
    assert all(isinstance(token, int) and token >= 1 for token in tokens)
    assert get_lock_token() is None
    idle()
    assert len(store) == 0


def test_a_waiter_is_woken_by_a_release() -> None:
    """With `wait`, a caller that found the permits taken gets one as soon as a holder ends."""
    clock = FakeTimeProvider()
    store = MemorySemaphoreStore(clock)
    pipeline = (
        ResiliencePipelineBuilder(time_provider=clock)
        .add_concurrency_limiter(1, key="k", store=store, ttl=TTL, wait=60)
        .build()
    )
    started = threading.Event()
    leave = threading.Event()
    holder = threading.Thread(target=pipeline.execute, args=(lambda: (started.set(), leave.wait(10)),))
    holder.start()
    started.wait(10)
    results: list[str] = []
    waiter = threading.Thread(target=lambda: results.append(pipeline.execute(lambda: "after the holder")))
    waiter.start()
    time.sleep(0.05)
    assert results == []
    leave.set()
    holder.join(10)
    waiter.join(10)
    assert results == ["after the holder"]


def test_a_lost_permit_behaves_as_a_lost_lock_lease() -> None:
    """Past its deadline the permit is lost: the signal aborts, an error becomes SemaphoreLeaseLostError."""
    clock = FakeTimeProvider()
    store = MemorySemaphoreStore(clock)
    pipeline = ResiliencePipelineBuilder(time_provider=clock).add_concurrency_limiter(1, store=store, ttl=TTL).build()

    def stalls() -> None:
        clock._timers.clear()  # the renewer never got to run
        clock.advance(2 * TTL)
        raise ValueError("late")

    with capture_events() as events:
        with pytest.raises(SemaphoreLeaseLostError) as caught:
            pipeline.execute(stalls)
        idle()
    assert isinstance(caught.value.__cause__, ValueError)
    assert "OnLockLost" in [e.name for e in events]


def test_renewal_keeps_a_long_job_alive() -> None:
    """A job longer than the ttl keeps its permit: renewed every ttl/3."""
    clock = FakeTimeProvider()
    store = MemorySemaphoreStore(clock)
    pipeline = ResiliencePipelineBuilder(time_provider=clock).add_concurrency_limiter(1, store=store, ttl=TTL).build()

    def long_job() -> int | None:
        for _ in range(10):
            clock.advance(TTL / 3)
            idle()
        return get_lock_token()

    assert pipeline.execute(long_job) is not None


def test_a_nested_execution_on_the_same_key_is_rejected() -> None:
    """Permits are not reentrant: the inner execution would wait on its own permit."""
    pipeline = ResiliencePipelineBuilder().add_concurrency_limiter(3, key="k", store=MemorySemaphoreStore()).build()

    def outer() -> str:
        with pytest.raises(RateLimiterRejectedError, match="not reentrant"):
            pipeline.execute(lambda: None)
        return "outer ran"

    assert pipeline.execute(outer) == "outer ran"


class AsyncOnlySemaphores:
    """A semaphore store with only the asyncio protocol."""

    def __init__(self) -> None:
        self.inner = MemorySemaphoreStore()

    async def acquire_async(self, key: str, owner: str, ttl: float, limit: int) -> int | None:
        return await self.inner.acquire_async(key, owner, ttl, limit)

    async def renew_async(self, key: str, owner: str, ttl: float) -> bool:
        return await self.inner.renew_async(key, owner, ttl)

    async def release_async(self, key: str, owner: str) -> bool:
        return await self.inner.release_async(key, owner)


async def test_async_permits_and_an_awaited_on_rejected() -> None:
    """Async executions take leased permits; an async on_rejected is awaited; sync is refused."""
    received: list[OnRateLimiterRejectedArguments] = []

    async def on_rejected(args: OnRateLimiterRejectedArguments) -> None:
        received.append(args)

    store = AsyncOnlySemaphores()
    pipeline = (
        ResiliencePipelineBuilder().add_concurrency_limiter(1, key="k", store=store, on_rejected=on_rejected).build()
    )
    gate = asyncio.Event()

    async def hold() -> int | None:
        await gate.wait()
        return get_lock_token()

    holder = asyncio.ensure_future(pipeline.execute_async(hold))
    await asyncio.sleep(0.02)

    async def other() -> None:
        return None

    with pytest.raises(RateLimiterRejectedError):
        await pipeline.execute_async(other)
    assert [r.key for r in received] == ["k"]
    gate.set()
    assert isinstance(await holder, int)
    with pytest.raises(ValidationError, match="has no sync client"):
        pipeline.execute(lambda: None)
    assert "limit=1" in repr(pipeline.strategies[0])


async def test_an_inner_limiter_rejection_does_not_call_the_outer_on_rejected() -> None:
    """on_rejected runs only for its own limiter's rejection, not one raised by the callable."""
    outer_calls: list[str] = []
    inner = ResiliencePipelineBuilder().add_concurrency_limiter(1, key="x", store=MemorySemaphoreStore()).build()
    outer = (
        ResiliencePipelineBuilder()
        .add_concurrency_limiter(
            2, key="y", store=MemorySemaphoreStore(), on_rejected=lambda a: outer_calls.append(a.key)
        )
        .build()
    )

    def nested() -> None:
        inner.execute(lambda: inner.execute(lambda: None))

    with pytest.raises(RateLimiterRejectedError):
        outer.execute(nested)

    async def anested() -> None:
        async def leaf() -> None:
            return None

        async def middle() -> None:
            await inner.execute_async(leaf)

        await inner.execute_async(middle)

    with pytest.raises(RateLimiterRejectedError):
        await outer.execute_async(anested)
    assert outer_calls == []
