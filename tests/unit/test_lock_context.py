"""Step 2, run: the fencing token in the ambient context, nesting and concurrency rules."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from resilience import LOCK_TOKEN, ResilienceContext, get_context, get_lock_token, use_context
from resilience.stores import MemoryLockStore
from tests.unit.lockkit import build

if TYPE_CHECKING:
    from resilience.testing import FakeTimeProvider


def test_the_token_is_visible_inside_and_absent_outside(clock: FakeTimeProvider) -> None:
    """get_lock_token() and properties[LOCK_TOKEN] carry the token only inside the lock."""
    pipeline = build(clock)

    def inside() -> tuple[int | None, int | None, bool]:
        context = get_context()
        assert context is not None
        return get_lock_token(), context.properties.get(LOCK_TOKEN), LOCK_TOKEN in context.properties

    assert pipeline.execute(inside) == (1, 1, True)
    assert get_lock_token() is None


def test_the_callers_context_is_not_mutated(clock: FakeTimeProvider) -> None:
    """The token lives in a derived context; the caller's context never gets it."""
    caller = ResilienceContext(operation_key="op")
    with use_context(caller):
        assert build(clock).execute(get_lock_token) == 1
        assert get_lock_token() is None
    assert LOCK_TOKEN not in caller.properties
    assert get_lock_token(caller) is None


def test_the_innermost_lock_wins_and_the_outer_returns(clock: FakeTimeProvider) -> None:
    """Nested pipelines: the inner token inside, the outer one again after it."""
    store = MemoryLockStore(clock)
    outer = build(clock, store=store, key="outer")
    inner = build(clock, store=store, key="inner")

    def body() -> tuple[int | None, int | None, int | None]:
        before = get_lock_token()
        during = inner.execute(get_lock_token)
        return before, during, get_lock_token()

    assert outer.execute(body) == (1, 2, 1)


def test_nested_strategies_in_one_pipeline(clock: FakeTimeProvider) -> None:
    """Two lock strategies in one pipeline: the callable sees the innermost's token."""
    from resilience import ResiliencePipelineBuilder

    store = MemoryLockStore(clock)
    pipeline = (
        ResiliencePipelineBuilder(time_provider=clock).add_lock("a", store=store).add_lock("b", store=store).build()
    )
    assert pipeline.execute(get_lock_token) == 2


def test_get_lock_token_reads_a_given_context(clock: FakeTimeProvider) -> None:
    """get_lock_token(context) reads that context, not the ambient one."""
    captured: list[ResilienceContext] = []
    build(clock).execute(lambda: captured.append(get_context()))  # type: ignore[arg-type]
    assert get_lock_token(captured[0]) == 1


async def test_gather_siblings_never_see_each_others_token(clock: FakeTimeProvider) -> None:
    """Concurrent nested locks in one execution: each sees its own token only."""
    store = MemoryLockStore(clock)
    outer = build(clock, store=store, key="outer")
    a = build(clock, store=store, key="a")
    b = build(clock, store=store, key="b")

    async def read(tag: str) -> tuple[str, int | None]:
        await asyncio.sleep(0)
        token = get_lock_token()
        await asyncio.sleep(0)
        assert get_lock_token() == token
        return tag, token

    async def body() -> object:
        pair = await asyncio.gather(a.execute_async(read, "a"), b.execute_async(read, "b"))
        return pair, get_lock_token()

    (first, second), after = await outer.execute_async(body)  # type: ignore[misc]
    assert after == 1
    assert {first[1], second[1]} == {2, 3}
    assert first[1] != second[1]


async def test_the_async_token_follows_to_threads(clock: FakeTimeProvider) -> None:
    """asyncio.to_thread copies the context: the token is visible in the thread."""

    async def body() -> int | None:
        return await asyncio.to_thread(get_lock_token)

    assert await build(clock).execute_async(body) == 1


def test_the_callable_runs_under_the_leases_signal(clock: FakeTimeProvider) -> None:
    """The derived context's signal is a child of the caller's: a caller abort reaches it."""
    from resilience import Signal

    root = Signal()
    seen: list[bool] = []

    def body() -> None:
        context = get_context()
        assert context is not None
        assert context.signal is not root
        root.abort()
        seen.append(context.signal.aborted)

    with use_context(signal=root):
        build(clock).settle(body)
    assert seen == [True]
