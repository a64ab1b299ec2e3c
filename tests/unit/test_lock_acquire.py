"""Step 1, acquire: fail fast, wait with backoff, wake on release, abort, not reentrant."""

from __future__ import annotations

import asyncio
import threading
from typing import TYPE_CHECKING

import pytest

from resilience import (
    LockNotAcquiredError,
    OperationAbortedError,
    ResiliencePipelineBuilder,
    Signal,
    get_lock_token,
    is_rejection,
    use_context,
)
from resilience.stores import MemoryLockStore
from tests.unit.lockkit import Events, FaultyStore, NotifyingStore, PlainStore, build, idle

if TYPE_CHECKING:
    from resilience.testing import FakeTimeProvider


def _hold(store: MemoryLockStore, key: str = "job", ttl: float = 30.0) -> str:
    owner = "holder"
    assert store.acquire(key, owner, ttl) is not None
    if isinstance(store, FaultyStore):
        store.calls.clear()
    return owner


def _run_in_thread(fn: object) -> tuple[threading.Thread, list[object]]:
    result: list[object] = []

    def target() -> None:
        try:
            result.append(fn())  # type: ignore[operator]
        except BaseException as exc:
            result.append(exc)

    thread = threading.Thread(target=target)
    thread.start()
    return thread, result


def _next_timer(clock: FakeTimeProvider) -> float | None:
    with clock._lock:
        live = [when for when, _, timer in clock._timers if timer._callback is not None]
    return min(live, default=None)


def _wait_until(predicate: object, timeout: float = 5.0) -> None:
    event = threading.Event()
    for _ in range(int(timeout / 0.001)):
        if predicate():  # type: ignore[operator]
            return
        event.wait(0.001)
    raise AssertionError("condition not reached")


class TestFailFast:
    def test_a_free_key_runs_the_callable_with_a_token(self, clock: FakeTimeProvider) -> None:
        """The callable runs under the lease's token; nothing is left held afterwards."""
        store = FaultyStore(clock)
        pipeline = build(clock, store=store)
        assert pipeline.execute(get_lock_token) == 1
        assert store.count("release") == 1
        assert len(store) == 0

    def test_a_held_key_is_rejected_at_once(self, clock: FakeTimeProvider) -> None:
        """wait=0: LockNotAcquiredError with the holder's time left; the callable never runs."""
        events = Events()
        store = FaultyStore(clock)
        _hold(store, ttl=12.0)
        ran: list[bool] = []
        with pytest.raises(LockNotAcquiredError) as caught:
            build(clock, events, store=store).execute(lambda: ran.append(True))
        assert ran == []
        assert caught.value.key == "job"
        assert caught.value.retry_after == pytest.approx(12.0)
        assert is_rejection(caught.value)
        assert events.names() == ["OnLockRejected"]
        rejected = events.named("OnLockRejected")[0]
        assert rejected.arguments.retry_after == pytest.approx(12.0)  # type: ignore[union-attr]
        assert rejected.arguments.wait_duration == 0.0  # type: ignore[union-attr]
        assert store.count("acquire") == 1

    async def test_a_held_key_is_rejected_at_once_async(self, clock: FakeTimeProvider) -> None:
        """The async twin rejects the same way."""
        store = FaultyStore(clock)
        _hold(store)

        async def never() -> None:
            raise AssertionError

        with pytest.raises(LockNotAcquiredError):
            await build(clock, store=store).execute_async(never)

    def test_a_store_without_lease_info_rejects_without_retry_after(self, clock: FakeTimeProvider) -> None:
        """retry_after is None when the store cannot tell the holder's time left."""
        inner = MemoryLockStore(clock)
        _hold(inner)
        with pytest.raises(LockNotAcquiredError) as caught:
            build(clock, store=PlainStore(inner)).execute(lambda: None)
        assert caught.value.retry_after is None

    def test_store_errors_from_acquire_propagate_unchanged(self, clock: FakeTimeProvider) -> None:
        """A store error is raised as is (retry it outside the lock) after a best-effort release."""
        store = FaultyStore(clock)
        error = ConnectionError("down")
        store.acquire_error = error
        with pytest.raises(ConnectionError) as caught:
            build(clock, store=store).execute(lambda: None)
        assert caught.value is error
        idle()  # the best-effort release goes in the background (the store may be down)
        assert store.owners("release") == store.owners("acquire")

    def test_an_interrupted_acquire_releases_its_owner(self, clock: FakeTimeProvider) -> None:
        """KeyboardInterrupt during the store call: a release for that owner id, then it propagates."""
        store = FaultyStore(clock)
        store.acquire_error = KeyboardInterrupt()
        with pytest.raises(KeyboardInterrupt):
            build(clock, store=store).execute(lambda: None)
        idle()
        assert store.count("release") == 1
        assert store.owners("release") == store.owners("acquire")

    def test_a_failed_best_effort_release_is_ignored(self, clock: FakeTimeProvider) -> None:
        """If the best-effort release fails too, the acquire's own error still propagates."""
        store = FaultyStore(clock)
        store.acquire_error = ConnectionError("down")
        store.release_error = ConnectionError("still down")
        with pytest.raises(ConnectionError, match=r"^down$"):
            build(clock, store=store).execute(lambda: None)

    async def test_a_cancelled_async_acquire_releases_its_owner(self, clock: FakeTimeProvider) -> None:
        """Cancellation during acquire_async: a background release for that owner id."""
        store = FaultyStore(clock)
        store.async_acquire_gate = asyncio.Event()

        async def body() -> None:
            raise AssertionError

        task = asyncio.ensure_future(build(clock, store=store).execute_async(body))
        await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        for _ in range(10):
            await asyncio.sleep(0)
        assert store.count("release") == 1
        assert store.owners("release") == [call[2] for call in store.calls if call[0] == "acquire-wait"]

    def test_owners_are_random_and_unique_per_execution(self, clock: FakeTimeProvider) -> None:
        """Each execution acquires under a fresh, random 128-bit owner id."""
        store = FaultyStore(clock)
        pipeline = build(clock, store=store)
        for _ in range(3):
            pipeline.execute(lambda: None)
        owners = store.owners("acquire")
        assert len(set(owners)) == 3
        assert all(len(owner) == 32 for owner in owners)
        int(owners[0], 16)


class TestWait:
    def test_waits_with_backoff_until_the_holder_releases(self, clock: FakeTimeProvider) -> None:
        """With a wait budget the caller polls, and runs once the holder is gone."""
        store = PlainStore(MemoryLockStore(clock))
        owner = _hold(store.inner)
        pipeline = build(clock, store=store, wait=10)
        thread, result = _run_in_thread(lambda: pipeline.execute(get_lock_token))
        _wait_until(lambda: clock.pending_timers > 0)
        clock.advance(0.05)
        store.release("job", owner)
        while thread.is_alive():
            clock.advance(0.05)
            thread.join(0.01)
        assert result == [2]

    def test_a_release_wakes_the_waiter_before_its_backoff_ends(self, clock: FakeTimeProvider) -> None:
        """The memory store notifies waiters: no clock movement is needed after the release."""
        store = MemoryLockStore(clock)
        owner = _hold(store)
        pipeline = build(clock, store=store, wait=10)
        thread, result = _run_in_thread(lambda: pipeline.execute(get_lock_token))
        _wait_until(lambda: bool(store._listeners))
        store.release("job", owner)
        thread.join(5)
        assert result == [2]

    def test_a_blocking_wait_released_wakes_the_waiter_too(self, clock: FakeTimeProvider) -> None:
        """A store with only `wait_released` (no listener) is polled in slices and woken by it."""
        inner = MemoryLockStore(clock)
        owner = _hold(inner)
        pipeline = build(clock, store=NotifyingStore(inner), wait=10)
        thread, result = _run_in_thread(lambda: pipeline.execute(get_lock_token))
        _wait_until(lambda: bool(inner._listeners))
        inner.release("job", owner)
        thread.join(5)
        assert result == [2]

    def test_a_blocking_wait_released_slices_until_the_budget_ends(self, clock: FakeTimeProvider) -> None:
        """Without a release, the sliced waits run out the budget, then the caller is rejected."""
        inner = MemoryLockStore(clock)
        _hold(inner)
        pipeline = build(clock, store=NotifyingStore(inner), wait=0.2)
        thread, result = _run_in_thread(lambda: pipeline.execute(get_lock_token))
        while thread.is_alive():
            clock.advance(0.01)
            thread.join(0.002)
        assert isinstance(result[0], LockNotAcquiredError)
        assert clock.monotonic() >= 0.2

    def test_the_budget_runs_out_with_a_last_attempt_at_the_deadline(self, clock: FakeTimeProvider) -> None:
        """When the holder never leaves: attempts until the deadline, the last one at it, then rejection."""
        events = Events()
        store = FaultyStore(clock)
        _hold(store)
        pipeline = build(clock, events, store=store, wait=2.0)
        thread, result = _run_in_thread(lambda: pipeline.execute(lambda: None))
        while thread.is_alive():
            # Move the clock only while the waiter sleeps, exactly to its wake-up time.
            _wait_until(lambda: not thread.is_alive() or _next_timer(clock) is not None)
            due = _next_timer(clock)
            if due is not None:
                clock.advance(due - clock.monotonic())
            thread.join(0.001)
        assert isinstance(result[0], LockNotAcquiredError)
        assert store.count("acquire") > 3
        assert clock.monotonic() == pytest.approx(2.0)
        wait = events.named("OnLockRejected")[0].arguments.wait_duration  # type: ignore[union-attr]
        assert wait == pytest.approx(2.0)

    def test_auto_advancing_clock_runs_the_wait_out_at_once(self, auto_clock: FakeTimeProvider) -> None:
        """On an auto-advancing fake clock the wait sleeps on the clock (single-flow tests)."""
        store = PlainStore(MemoryLockStore(auto_clock))
        _hold(store.inner, ttl=100.0)
        with pytest.raises(LockNotAcquiredError):
            build(auto_clock, store=store, wait=5.0).execute(lambda: None)
        assert auto_clock.monotonic() == pytest.approx(5.0)

    def test_an_expiring_holder_is_polled_when_it_expires(self, clock: FakeTimeProvider) -> None:
        """The wait is capped by the holder's time left: the caller gets the key as it expires."""
        store = FaultyStore(clock)
        _hold(store, ttl=0.01)
        pipeline = build(clock, store=store, wait=10)
        thread, result = _run_in_thread(lambda: pipeline.execute(get_lock_token))
        _wait_until(lambda: _next_timer(clock) is not None)
        assert _next_timer(clock) == pytest.approx(0.01)  # not the 25-50 ms backoff
        clock.advance(0.01)
        thread.join(5)
        assert result == [2]

    def test_the_signal_aborting_ends_the_wait_with_its_reason(self, clock: FakeTimeProvider) -> None:
        """Abort while waiting: the reason is raised at once and the callable never runs."""
        store = MemoryLockStore(clock)
        _hold(store)
        pipeline = build(clock, store=store, wait=100)
        signal = Signal()
        ran: list[bool] = []

        def call() -> object:
            with use_context(signal=signal):
                return pipeline.execute(lambda: ran.append(True))

        thread, result = _run_in_thread(call)
        _wait_until(lambda: bool(store._listeners))
        reason = OperationAbortedError("stop")
        signal.abort(reason)
        thread.join(5)
        assert result == [reason]
        assert ran == []

    def test_an_aborted_signal_never_acquires(self, clock: FakeTimeProvider) -> None:
        """A caller whose signal already aborted does not even ask the store."""
        store = FaultyStore(clock)
        signal = Signal()
        signal.abort()
        with use_context(signal=signal), pytest.raises(OperationAbortedError):
            build(clock, store=store).execute(lambda: None)
        assert store.calls == []

    async def test_async_wait_is_woken_by_a_release(self, clock: FakeTimeProvider) -> None:
        """The async waiter awaits the store's release notification."""
        store = MemoryLockStore(clock)
        owner = _hold(store)

        async def body() -> int | None:
            return get_lock_token()

        task = asyncio.ensure_future(build(clock, store=store, wait=10).execute_async(body))
        await asyncio.sleep(0.01)
        assert not task.done()
        store.release("job", owner)
        assert await asyncio.wait_for(task, 5) == 2

    async def test_async_wait_polls_a_store_without_notification(self, clock: FakeTimeProvider) -> None:
        """Without notification the async waiter sleeps on the clock between attempts."""
        store = PlainStore(MemoryLockStore(clock))
        owner = _hold(store.inner)

        async def body() -> int | None:
            return get_lock_token()

        task = asyncio.ensure_future(build(clock, store=store, wait=10).execute_async(body))
        await asyncio.sleep(0.01)
        store.release("job", owner)
        while not task.done():
            clock.advance(0.05)
            await asyncio.sleep(0.001)
        assert task.result() == 2

    async def test_async_wait_runs_out(self, clock: FakeTimeProvider) -> None:
        """The async budget runs out into LockNotAcquiredError."""
        store = MemoryLockStore(clock)
        _hold(store)

        async def body() -> None:
            raise AssertionError

        task = asyncio.ensure_future(build(clock, store=store, wait=1).execute_async(body))
        while not task.done():
            clock.advance(0.05)
            await asyncio.sleep(0.001)
        with pytest.raises(LockNotAcquiredError):
            task.result()

    async def test_the_signal_aborting_ends_an_async_wait(self, clock: FakeTimeProvider) -> None:
        """Abort while an async caller waits: its reason is raised, the callable never runs."""
        store = MemoryLockStore(clock)
        _hold(store)
        signal = Signal()

        async def body() -> None:
            raise AssertionError

        async def call() -> None:
            with use_context(signal=signal):
                await build(clock, store=store, wait=100).execute_async(body)

        task = asyncio.ensure_future(call())
        await asyncio.sleep(0.01)
        reason = OperationAbortedError("stop")
        signal.abort(reason)
        with pytest.raises(OperationAbortedError) as caught:
            await task
        assert caught.value is reason


class TestNotReentrant:
    def test_a_key_held_by_the_same_chain_is_rejected_at_once(self, clock: FakeTimeProvider) -> None:
        """A nested execution locking the same key fails at once instead of waiting on itself."""
        store = MemoryLockStore(clock)
        pipeline = build(clock, store=store, wait=100)

        def outer() -> str:
            try:
                pipeline.execute(lambda: None)
            except LockNotAcquiredError as exc:
                return str(exc)
            return "ran"

        assert "not reentrant" in pipeline.execute(outer)

    def test_another_key_or_store_nests_fine(self, clock: FakeTimeProvider) -> None:
        """Only the same key on the same store counts as re-entry."""
        store = MemoryLockStore(clock)
        outer = build(clock, store=store)
        other_key = build(clock, store=store, key="other")
        other_store = build(clock, store=MemoryLockStore(clock))
        assert outer.execute(lambda: (other_key.execute(get_lock_token), other_store.execute(get_lock_token))) == (
            2,
            1,
        )

    async def test_reentry_is_refused_in_async_code_too(self, clock: FakeTimeProvider) -> None:
        """The async twin refuses re-entry the same way."""
        pipeline = build(clock, wait=100)

        async def inner() -> None:
            raise AssertionError

        async def outer() -> None:
            await pipeline.execute_async(inner)

        with pytest.raises(LockNotAcquiredError, match="not reentrant"):
            await pipeline.execute_async(outer)

    def test_the_key_function_sees_the_context(self, clock: FakeTimeProvider) -> None:
        """A callable key is resolved per execution from its context."""
        store = FaultyStore(clock)
        pipeline = build(clock, store=store, key=lambda ctx: f"order:{ctx.operation_key}")
        with use_context(operation_key="42"):
            pipeline.execute(lambda: None)
        assert store.calls[0][1] == "order:42"


def test_the_default_store_is_shared_by_every_lock_on_the_clock(clock: FakeTimeProvider) -> None:
    """Two pipelines on one clock exclude each other without naming a store."""
    first = ResiliencePipelineBuilder(time_provider=clock).add_lock("k").build()
    second = ResiliencePipelineBuilder(time_provider=clock).add_lock("k").build()
    with pytest.raises(LockNotAcquiredError):
        first.execute(lambda: second.execute(lambda: None))
    idle()


async def test_an_async_wait_moves_an_auto_advancing_fake_clock() -> None:
    """Under FakeTimeProvider(auto_advance=True) an async lock wait sleeps on the clock instead of hanging."""
    import asyncio as _asyncio

    from resilience import ResiliencePipelineBuilder
    from resilience.stores import MemoryLockStore
    from resilience.testing import FakeTimeProvider

    clock = FakeTimeProvider(auto_advance=True)
    store = MemoryLockStore(clock)
    store.acquire("k", "someone-else", 5)
    pipeline = ResiliencePipelineBuilder(time_provider=clock).add_lock("k", store=store, wait=10).build()

    async def body() -> str:
        return "ran"

    assert await _asyncio.wait_for(pipeline.execute_async(body), 5) == "ran"
    assert 5 <= clock.monotonic() < 10


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_an_auto_advancing_clock_runs_the_release_notification_path(mode: str) -> None:
    """On FakeTimeProvider(auto_advance=True) a lock wait is woken by the release, as on the real clock.

    The holder releases at 2 s (a timer on the clock) although its lease runs to 5 s: the
    waiter gets the key at 2 s, which only a wait for the release notification can do.
    """
    import asyncio as _asyncio

    from resilience import ResiliencePipelineBuilder
    from resilience.stores import MemoryLockStore
    from resilience.testing import FakeTimeProvider

    clock = FakeTimeProvider(auto_advance=True)
    store = MemoryLockStore(clock)
    store.acquire("k", "someone-else", 5)
    clock.call_later(2, lambda: store.release("k", "someone-else"))
    pipeline = ResiliencePipelineBuilder(time_provider=clock).add_lock("k", store=store, wait=10).build()
    if mode == "sync":
        assert pipeline.execute(lambda: "ran") == "ran"
    else:

        async def body() -> str:
            return "ran"

        assert _asyncio.run(pipeline.execute_async(body)) == "ran"
    assert clock.monotonic() == pytest.approx(2.0)
