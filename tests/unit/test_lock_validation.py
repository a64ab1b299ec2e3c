"""Lock options: validated at build(), misuse detected at run time."""

from __future__ import annotations

import dataclasses
import datetime as dt

import pytest

from resilience import PipelineBuilder, ResiliencePipelineBuilder, ValidationError
from resilience.stores import MemoryLockStore, MemorySemaphoreStore
from resilience.strategies import LockStrategyOptions, lock_strategy
from resilience.testing import FakeTimeProvider
from tests.unit.lockkit import AsyncOnlyStore, SyncOnlyStore, build


def _problems(**options: object) -> list[str]:
    key = options.pop("key", "k")
    with pytest.raises(ValidationError) as caught:
        ResiliencePipelineBuilder().add_lock(key, **options).build()  # type: ignore[arg-type]
    return caught.value.problems


def test_factory_returns_frozen_options_and_validates_nothing() -> None:
    """lock_strategy() only records its arguments; the options are immutable."""
    options = lock_strategy("", ttl=-1)
    assert isinstance(options, LockStrategyOptions)
    assert (options.key, options.ttl, options.wait, options.name) == ("", -1, 0.0, "Lock")
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.ttl = 3  # type: ignore[misc]


def test_defaults() -> None:
    """ttl=30, wait=0, no store, no callback, no cancellation, name Lock."""
    options = lock_strategy("k")
    assert (options.ttl, options.wait, options.store, options.on_lock_lost, options.cancel_on_lost) == (
        30.0,
        0.0,
        None,
        None,
        False,
    )


@pytest.mark.parametrize(
    ("options", "problem"),
    [
        ({"key": ""}, "Lock.key: must be a non-empty string"),
        ({"key": 3}, "Lock.key: must be a non-empty string or a callable"),
        ({"ttl": 0}, "Lock.ttl: must be >= 0.001 seconds"),
        ({"ttl": 0.0005}, "Lock.ttl: must be >= 0.001 seconds"),
        ({"ttl": True}, "Lock.ttl: must be a duration"),
        ({"ttl": float("inf")}, "Lock.ttl: must be finite"),
        ({"wait": -1}, "Lock.wait: must be >= 0"),
        ({"wait": "1"}, "Lock.wait: must be a duration"),
        ({"store": object()}, "Lock.store: must implement LockStore or AsyncLockStore"),
        ({"store": MemorySemaphoreStore()}, "Lock.store: is a semaphore store"),
        ({"store": MemoryLockStore(FakeTimeProvider())}, "Lock.store: a MemoryLockStore must use the pipeline's"),
        ({"on_lock_lost": 3}, "Lock.on_lock_lost: must be callable"),
        ({"cancel_on_lost": 1}, "Lock.cancel_on_lost: must be a bool"),
        ({"name": ""}, ".name: must be a non-empty string"),
    ],
)
def test_each_bad_option_is_a_problem(options: dict[str, object], problem: str) -> None:
    """Every invalid option is reported as '<name>.<option>: <what is wrong>'."""
    problems = _problems(**options)
    assert any(p.startswith(problem) for p in problems), problems


def test_every_problem_is_reported_at_once() -> None:
    """One ValidationError lists all problems."""
    assert len(_problems(key="", ttl=0, wait=-1)) == 3


def test_the_problem_prefix_is_the_strategys_name() -> None:
    """A custom name prefixes its problems."""
    assert _problems(ttl=0, name="Nightly")[0].startswith("Nightly.ttl:")


def test_valid_durations_include_timedelta() -> None:
    """ttl and wait accept timedelta."""
    PipelineBuilder().add(lock_strategy("k", ttl=dt.timedelta(seconds=5), wait=dt.timedelta(0))).build()


def test_a_memory_store_on_the_pipelines_clock_is_accepted(clock: FakeTimeProvider) -> None:
    """The same clock in store and pipeline builds fine."""
    assert build(clock, store=MemoryLockStore(clock)).execute(lambda: 1) == 1


def test_a_key_function_returning_a_non_string_is_misuse(clock: FakeTimeProvider) -> None:
    """A key function must return a non-empty str: ValidationError at run time."""
    with pytest.raises(ValidationError, match=r"Lock\.key: the key function returned 42"):
        build(clock, key=lambda ctx: 42).execute(lambda: None)
    with pytest.raises(ValidationError, match="returned ''"):
        build(clock, key=lambda ctx: "").execute(lambda: None)


def test_a_sync_execution_with_an_async_only_store_is_refused(clock: FakeTimeProvider) -> None:
    """Before any strategy runs, naming what to pass instead."""
    pipeline = build(clock, store=AsyncOnlyStore(MemoryLockStore(clock)))
    ran: list[bool] = []
    with pytest.raises(ValidationError, match="no sync client"):
        pipeline.execute(lambda: ran.append(True))
    assert ran == []


async def test_an_async_execution_with_a_sync_only_store_is_refused(clock: FakeTimeProvider) -> None:
    """The reverse: an async execution with a sync-only store."""
    pipeline = build(clock, store=SyncOnlyStore(MemoryLockStore(clock)))

    async def body() -> None:
        raise AssertionError

    with pytest.raises(ValidationError, match="no asyncio client"):
        await pipeline.execute_async(body)


async def test_an_async_only_store_serves_async_executions(clock: FakeTimeProvider) -> None:
    """The flavour the store has works."""

    async def body() -> int:
        return 7

    assert await build(clock, store=AsyncOnlyStore(MemoryLockStore(clock))).execute_async(body) == 7


def test_add_lock_equals_add_lock_strategy() -> None:
    """The builder shortcut adds exactly lock_strategy(...)."""
    builder = ResiliencePipelineBuilder().add_lock("k", ttl=5, wait=1, name="L")
    assert builder._strategies == [lock_strategy("k", ttl=5, wait=1, name="L")]


def test_the_strategy_repr_shows_its_options(clock: FakeTimeProvider) -> None:
    """A built lock strategy describes itself."""
    strategy = build(clock, ttl=5).strategies[0]
    assert "LockStrategy" in repr(strategy)
    assert "ttl=5.0" in repr(strategy)


def test_public_lock_names_are_exported_sorted() -> None:
    """The lock's public names are in sorted __all__ lists of their packages."""
    import resilience.stores
    import resilience.strategies

    for module in (resilience.stores, resilience.strategies):
        assert module.__all__ == sorted(module.__all__)
    assert {"MemoryLockStore", "MemorySemaphoreStore"} <= set(resilience.stores.__all__)
    assert {"LockEventArguments", "LockStrategyOptions", "OnLockLostArguments", "lock_strategy"} <= set(
        resilience.strategies.__all__
    )
