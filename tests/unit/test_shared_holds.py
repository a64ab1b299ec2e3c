"""Shared holds through the pipeline and the primitive (DESIGN §2.20): options, refusals, events."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from resilience import ResiliencePipelineBuilder, get_lock_token
from resilience.exceptions import LockNotAcquiredError, ValidationError
from resilience.primitives import lock
from resilience.stores import MemoryLockStore, SupportsSharedHolds
from resilience.strategies import lock_strategy
from resilience.telemetry import TelemetryEvent, TelemetryOptions
from resilience.testing import FakeTimeProvider


class ExclusiveOnly:
    """A third-party lock store without shared holds; it records every call it gets."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def acquire(self, key: str, owner: str, ttl: float) -> int | None:
        self.calls.append("acquire")
        return 1

    def renew(self, key: str, owner: str, ttl: float) -> bool:
        self.calls.append("renew")
        return True

    def release(self, key: str, owner: str) -> bool:
        self.calls.append("release")
        return True

    def __repr__(self) -> str:
        return "ExclusiveOnly()"


def test_the_memory_store_offers_shared_holds_and_a_plain_store_does_not() -> None:
    assert isinstance(MemoryLockStore(), SupportsSharedHolds)
    assert not isinstance(ExclusiveOnly(), SupportsSharedHolds)


def test_build_refuses_shared_on_a_store_without_the_capability() -> None:
    """`build()` names the store and the option; nothing is locked."""
    store = ExclusiveOnly()
    with pytest.raises(ValidationError) as caught:
        ResiliencePipelineBuilder().add_lock("k", store=store, shared=True).build()
    assert any(problem.startswith("Lock.shared:") and "ExclusiveOnly()" in problem for problem in caught.value.problems)
    assert store.calls == []
    ResiliencePipelineBuilder().add_lock("k", store=store).build()  # exclusive: fine


def test_build_refuses_a_shared_option_that_is_not_a_bool() -> None:
    with pytest.raises(ValidationError, match=r"Lock\.shared: must be a bool"):
        ResiliencePipelineBuilder().add_lock("k", shared="yes").build()  # type: ignore[arg-type]


async def test_the_primitive_refuses_shared_before_anything_is_locked() -> None:
    """Every call of the primitive with shared=True on such a store: ValidationError naming the store."""
    store = ExclusiveOnly()
    locks = lock(store)
    calls: list[Any] = [
        lambda: locks.run("k", lambda _: None, shared=True),
        lambda: locks.hold("k", shared=True),
        lambda: locks.acquire("k", shared=True),
    ]
    for call in calls:
        with pytest.raises(ValidationError, match=r"shared.*the store ExclusiveOnly\(\) cannot hold keys shared"):
            call()
    with pytest.raises(ValidationError, match="cannot hold keys shared"):
        await locks.acquire_async("k", shared=True)
    with pytest.raises(ValidationError, match="cannot hold keys shared"):
        await locks.run_async("k", _nothing, shared=True)
    assert store.calls == []


async def _nothing(_: object) -> None:
    return None


def test_a_semaphore_has_no_shared_holds() -> None:
    from resilience.primitives import semaphore
    from resilience.stores import MemorySemaphoreStore

    with pytest.raises(ValidationError, match="shared: a semaphore has no shared holds"):
        semaphore(MemorySemaphoreStore(), limit=2).acquire("k", shared=True)
    with pytest.raises(ValidationError, match="shared: a semaphore has no shared holds"):
        semaphore(MemorySemaphoreStore(), limit=2).hold("k", shared=True)


def test_pipeline_readers_run_together_and_a_writer_is_refused() -> None:
    """Two shared executions nest (different pipelines, one store); an exclusive one is refused meanwhile."""
    clock = FakeTimeProvider()
    store = MemoryLockStore(clock)
    reader = ResiliencePipelineBuilder(time_provider=clock).add_lock("doc", store=store, shared=True).build()
    writer = ResiliencePipelineBuilder(time_provider=clock).add_lock("doc", store=store).build()
    locks = lock(store, prefix="x", time_provider=clock)

    def outer() -> tuple[int | None, int | None]:
        token = get_lock_token()
        with locks.hold("other", shared=True):
            pass
        with pytest.raises(LockNotAcquiredError):
            writer.execute(lambda: None)
        return token, store.acquire_shared("doc", "someone", 10)

    outer_token, inner_token = reader.execute(outer)
    assert outer_token is not None
    assert inner_token is not None
    assert inner_token > outer_token
    assert store.release("doc", "someone") is True
    assert writer.execute(get_lock_token) > inner_token  # type: ignore[operator]


def test_the_pipeline_is_not_reentrant_in_shared_mode() -> None:
    store = MemoryLockStore()
    pipeline = ResiliencePipelineBuilder().add_lock("k", store=store, shared=True).build()
    with pytest.raises(LockNotAcquiredError, match="not reentrant"):
        pipeline.execute(lambda: pipeline.execute(lambda: None))


async def test_async_pipeline_readers_overlap() -> None:
    store = MemoryLockStore()
    pipeline = ResiliencePipelineBuilder().add_lock("k", store=store, shared=True, wait=5).build()
    inside = 0
    most = 0
    both_in = asyncio.Event()

    async def body() -> int | None:
        nonlocal inside, most
        inside += 1
        most = max(most, inside)
        if inside == 2:
            both_in.set()
        await asyncio.wait_for(both_in.wait(), 5)
        inside -= 1
        return get_lock_token()

    tokens = await asyncio.gather(pipeline.execute_async(body), pipeline.execute_async(body))
    assert most == 2
    assert len(set(tokens)) == 2


def test_lock_events_carry_the_mode() -> None:
    """`OnLockAcquired` / `OnLockReleased` / `OnLockRejected` say "shared" or "exclusive" in their arguments."""
    events: list[TelemetryEvent] = []
    telemetry = TelemetryOptions(listeners=[events.append])
    store = MemoryLockStore()
    reader = ResiliencePipelineBuilder(telemetry=telemetry).add_lock("k", store=store, shared=True).build()
    writer = ResiliencePipelineBuilder(telemetry=telemetry).add_lock("k", store=store).build()
    reader.execute(lambda: None)

    def refused() -> None:
        with pytest.raises(LockNotAcquiredError):
            writer.execute(lambda: None)

    reader.execute(refused)
    modes = {
        (event.name, getattr(event.arguments, "mode", None)) for event in events if event.name.startswith("OnLock")
    }
    assert ("OnLockAcquired", "shared") in modes
    assert ("OnLockReleased", "shared") in modes
    assert ("OnLockRejected", "exclusive") in modes


def test_lock_strategy_records_shared() -> None:
    assert lock_strategy("k", shared=True).shared is True
    assert lock_strategy("k").shared is False
