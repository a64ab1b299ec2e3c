"""Steps 3-5, renew, lose, release: under a fake clock, sync and async."""

from __future__ import annotations

import asyncio
import logging
import threading
from typing import TYPE_CHECKING

import pytest

from resilience import LockLostError, TimeoutRejectedError, get_context, get_lock_token
from resilience._lease import RELEASE_TIMEOUT
from resilience.stores import MemoryLockStore
from tests.unit.lockkit import Events, FaultyStore, astep, build, idle, settle, step

if TYPE_CHECKING:
    from resilience.strategies import OnLockLostArguments
    from resilience.testing import FakeTimeProvider

TTL = 3.0


def _signal_reason() -> BaseException | None:
    context = get_context()
    assert context is not None
    return context.signal.reason


class TestRenew:
    def test_renewal_keeps_a_long_job_alive(self, clock: FakeTimeProvider) -> None:
        """A job ten times longer than the ttl keeps its lease: renewed every ttl/3."""
        events = Events()
        store = FaultyStore(clock)

        def job() -> int | None:
            step(clock, 10 * TTL)
            assert not _signal_reason()
            assert store.acquire("job", "other", TTL) is None
            return get_lock_token()

        assert build(clock, events, store=store, ttl=TTL).execute(job) == 1
        assert 29 <= store.count("renew") <= 30  # float steps may stop just short of 30.0
        assert "OnLockLost" not in events.names()
        assert events.names() == ["OnLockAcquired", "OnLockReleased"]
        hold = events.named("OnLockReleased")[0].arguments.hold_duration  # type: ignore[union-attr]
        assert hold == pytest.approx(10 * TTL)

    async def test_renewal_keeps_a_long_async_job_alive(self, clock: FakeTimeProvider) -> None:
        """The async twin renews on loop timers, one short task per renewal."""
        store = FaultyStore(clock)

        async def job() -> int | None:
            await astep(clock, 10 * TTL)
            assert not _signal_reason()
            return get_lock_token()

        assert await build(clock, store=store, ttl=TTL).execute_async(job) == 1
        assert 29 <= store.count("renew") <= 30  # float steps may stop just short of 30.0

    def test_a_short_job_costs_no_renewal(self, clock: FakeTimeProvider) -> None:
        """A body that ends inside the first interval sends acquire and release only."""
        store = FaultyStore(clock)
        build(clock, store=store, ttl=TTL).execute(lambda: step(clock, TTL / 3 - 0.01))
        assert [call[0] for call in store.calls] == ["acquire", "release"]
        assert clock.pending_timers <= 1  # the clock's shared scheduler, disarmed lazily
        step(clock, TTL)
        assert clock.pending_timers == 0
        assert [call[0] for call in store.calls] == ["acquire", "release"]

    def test_failed_renewals_are_reported_and_retried(self, clock: FakeTimeProvider) -> None:
        """A renewal error emits OnLockRenewalFailed and is retried with backoff; a later success saves the lease."""
        events = Events()
        store = FaultyStore(clock)
        error = ConnectionError("blip")

        def job() -> int | None:
            store.renew_error = error
            step(clock, TTL / 3 + 0.2, dt=0.01)
            store.renew_error = None
            step(clock, TTL, dt=0.01)
            return get_lock_token()

        assert build(clock, events, store=store, ttl=TTL).execute(job) == 1
        failed = events.named("OnLockRenewalFailed")
        assert len(failed) >= 2
        assert failed[0].arguments.error is error  # type: ignore[union-attr]
        assert "OnLockLost" not in events.names()

    async def test_failed_async_renewals_are_reported_and_retried(self, clock: FakeTimeProvider) -> None:
        """The async twin reports and retries failed renewals the same way."""
        events = Events()
        store = FaultyStore(clock)

        async def job() -> int | None:
            store.renew_error = ConnectionError("blip")
            await astep(clock, TTL / 3 + 0.2, dt=0.01)
            store.renew_error = None
            await astep(clock, TTL, dt=0.01)
            return get_lock_token()

        assert await build(clock, events, store=store, ttl=TTL).execute_async(job) == 1
        await settle()
        assert len(events.named("OnLockRenewalFailed")) >= 2
        assert "OnLockLost" not in events.names()

    def test_renewal_errors_until_the_deadline_lose_the_lease(self, clock: FakeTimeProvider) -> None:
        """Failing renewals never extend the lease: the local deadline declares it lost."""
        events = Events()
        store = FaultyStore(clock)
        store.renew_error = ConnectionError("down")

        def job() -> BaseException | None:
            step(clock, TTL, dt=0.01)
            return _signal_reason()

        reason = build(clock, events, store=store, ttl=TTL).execute(job)
        idle()
        assert isinstance(reason, LockLostError)
        assert clock.monotonic() >= TTL - 0.03
        assert events.names().count("OnLockLost") == 1


class TestLose:
    def test_the_store_saying_not_ours_loses_the_lease(self, clock: FakeTimeProvider) -> None:
        """Another owner took the key: the next renewal answers False and the signal aborts."""
        events = Events()
        store = FaultyStore(clock)
        lost: list[OnLockLostArguments] = []

        def job() -> object:
            store.steal("job")
            step(clock, TTL / 3)
            return _signal_reason()

        reason = build(clock, events, store=store, ttl=TTL, on_lock_lost=lost.append).execute(job)
        idle()
        assert isinstance(reason, LockLostError)
        assert (reason.key, reason.token) == ("job", 1)
        assert [(a.key, a.token) for a in lost] == [("job", 1)]
        assert lost[0].context.signal.reason is reason
        assert events.names() == ["OnLockAcquired", "OnLockLost"]
        assert store.acquire("job", "someone", TTL) is None  # the thief's lease was left alone

    def test_a_deleted_key_loses_the_lease(self, clock: FakeTimeProvider) -> None:
        """An operator deleting the key: renew answers False."""
        store = FaultyStore(clock)

        def job() -> object:
            with store._mutex:
                store._leases.clear()
            step(clock, TTL / 3)
            return _signal_reason()

        assert isinstance(build(clock, store=store, ttl=TTL).execute(job), LockLostError)

    def test_the_deadline_fires_while_a_renewal_hangs(self, clock: FakeTimeProvider) -> None:
        """Loss detection does not wait for a hanging store call: the deadline timer aborts the signal."""
        store = FaultyStore(clock)
        store.renew_gate = gate = threading.Event()
        lost: list[OnLockLostArguments] = []

        def job() -> object:
            clock.advance(TTL / 3)  # the renewal starts and hangs on the renewer thread
            clock.advance(TTL)  # the deadline passes meanwhile
            reason = _signal_reason()
            gate.set()  # the renewal answers (True, too late): ignored
            return reason

        reason = build(clock, store=store, ttl=TTL, on_lock_lost=lost.append).execute(job)
        idle()
        assert isinstance(reason, LockLostError)
        assert len(lost) == 1

    async def test_the_deadline_cancels_an_async_renewal_that_hangs(self, clock: FakeTimeProvider) -> None:
        """Async: the deadline aborts the signal and cancels the renewal in flight."""
        store = FaultyStore(clock)
        store.async_renew_gate = asyncio.Event()

        async def job() -> object:
            await astep(clock, TTL / 3 + 0.01)
            assert store.renew_cancelled == 0
            await astep(clock, TTL)
            return _signal_reason()

        reason = await build(clock, store=store, ttl=TTL).execute_async(job)
        await settle()
        assert isinstance(reason, LockLostError)
        assert store.renew_cancelled == 1

    def test_the_deadline_is_checked_again_when_the_callable_ends(self, clock: FakeTimeProvider) -> None:
        """A body that blocked its timers past the deadline is still seen to have lost the lease."""
        events = Events()
        store = FaultyStore(clock)

        def job() -> str:
            clock._timers.clear()  # as if the timer never got to run
            clock.advance(2 * TTL)
            return "done"

        assert build(clock, events, store=store, ttl=TTL).execute(job) == "done"
        idle()
        assert events.names() == ["OnLockAcquired", "OnLockLost"]

    def test_a_final_release_answering_false_means_lost(self, clock: FakeTimeProvider) -> None:
        """Stolen after the last renewal: the release says so, and on_lock_lost runs."""
        lost: list[OnLockLostArguments] = []
        store = FaultyStore(clock)

        def job() -> str:
            store.steal("job")
            return "done"

        assert build(clock, store=store, on_lock_lost=lost.append).execute(job) == "done"
        idle()
        assert len(lost) == 1

    def test_loss_is_reported_once_per_lease(self, clock: FakeTimeProvider) -> None:
        """Store answer, deadline and final release all see the loss; it is reported once."""
        events = Events()
        store = FaultyStore(clock)

        def job() -> None:
            store.steal("job")
            step(clock, 2 * TTL)

        build(clock, events, store=store, ttl=TTL).execute(job)
        idle()
        assert events.names().count("OnLockLost") == 1

    def test_on_lock_lost_exceptions_are_logged_not_raised(
        self, clock: FakeTimeProvider, caplog: pytest.LogCaptureFixture
    ) -> None:
        """A failing on_lock_lost is logged; the event is still emitted."""
        events = Events()
        store = FaultyStore(clock)

        def boom(_arguments: OnLockLostArguments) -> None:
            raise RuntimeError("boom")

        with caplog.at_level(logging.ERROR, logger="resilience"):
            build(clock, events, store=store, on_lock_lost=boom).execute(lambda: store.steal("job"))
            idle()
        assert "on_lock_lost raised" in caplog.text
        assert "OnLockLost" in events.names()

    def test_an_async_on_lock_lost_in_a_sync_execution_is_closed(
        self, clock: FakeTimeProvider, caplog: pytest.LogCaptureFixture
    ) -> None:
        """An awaitable returned to a sync execution is closed and logged, not left unawaited."""
        store = FaultyStore(clock)

        async def callback(_arguments: OnLockLostArguments) -> None:
            raise AssertionError

        with caplog.at_level(logging.ERROR, logger="resilience"):
            build(clock, store=store, on_lock_lost=callback).execute(lambda: store.steal("job"))
            idle()
        assert "returned an awaitable" in caplog.text

    async def test_an_async_on_lock_lost_is_awaited(self, clock: FakeTimeProvider) -> None:
        """In an async execution an awaitable returned by on_lock_lost is awaited."""
        store = FaultyStore(clock)
        seen: list[int] = []

        async def callback(arguments: OnLockLostArguments) -> None:
            await asyncio.sleep(0)
            seen.append(arguments.token)

        async def job() -> None:
            store.steal("job")

        await build(clock, store=store, on_lock_lost=callback).execute_async(job)
        await settle()
        assert seen == [1]

    async def test_a_failing_async_on_lock_lost_is_logged(
        self, clock: FakeTimeProvider, caplog: pytest.LogCaptureFixture
    ) -> None:
        """An async on_lock_lost that raises is logged."""
        store = FaultyStore(clock)

        async def callback(_arguments: OnLockLostArguments) -> None:
            raise RuntimeError("boom")

        async def job() -> None:
            store.steal("job")

        with caplog.at_level(logging.ERROR, logger="resilience"):
            await build(clock, store=store, on_lock_lost=callback).execute_async(job)
            await settle()
        assert "on_lock_lost raised" in caplog.text


class TestResultTable:
    def test_a_success_after_the_loss_is_returned(self, clock: FakeTimeProvider) -> None:
        """The callable returned v: v (check the signal or use fencing)."""
        store = FaultyStore(clock)

        def job() -> str:
            store.steal("job")
            step(clock, TTL / 3)
            assert isinstance(_signal_reason(), LockLostError)
            return "v"

        assert build(clock, store=store, ttl=TTL).execute(job) == "v"

    def test_raising_the_signals_reason_propagates_it_unchanged(self, clock: FakeTimeProvider) -> None:
        """The callable raised the LockLostError it was aborted with: the same object comes out."""
        store = FaultyStore(clock)
        seen: list[BaseException] = []

        def job() -> None:
            store.steal("job")
            step(clock, TTL / 3)
            context = get_context()
            assert context is not None
            seen.append(context.signal.reason)  # type: ignore[arg-type]
            context.signal.raise_if_aborted()

        with pytest.raises(LockLostError) as caught:
            build(clock, store=store, ttl=TTL).execute(job)
        assert caught.value is seen[0]
        assert caught.value.__cause__ is None

    def test_any_other_error_becomes_lock_lost_from_it(self, clock: FakeTimeProvider) -> None:
        """The callable raised e after the loss: LockLostError raised from e."""
        store = FaultyStore(clock)

        def job() -> None:
            store.steal("job")
            step(clock, TTL / 3)
            raise ValueError("half-done")

        with pytest.raises(LockLostError) as caught:
            build(clock, store=store, ttl=TTL).execute(job)
        assert isinstance(caught.value.__cause__, ValueError)

    def test_an_error_without_a_loss_is_unchanged(self, clock: FakeTimeProvider) -> None:
        """No loss: the callable's exception propagates as it is, and the lease is released."""
        store = FaultyStore(clock)
        error = ValueError("x")

        def job() -> None:
            raise error

        with pytest.raises(ValueError) as caught:
            build(clock, store=store).execute(job)
        assert caught.value is error
        assert store.count("release") == 1

    def test_a_base_exception_passes_through_and_releases(self, clock: FakeTimeProvider) -> None:
        """KeyboardInterrupt is never converted; the lease is still released."""
        store = FaultyStore(clock)

        def job() -> None:
            store.steal("job")
            raise KeyboardInterrupt

        with pytest.raises(KeyboardInterrupt):
            build(clock, store=store).execute(job)
        assert store.count("release") == 1

    def test_an_outer_abort_reason_propagates_unchanged(self, clock: FakeTimeProvider) -> None:
        """The lease's signal follows the caller's: an outer reason raised inside stays itself."""
        store = FaultyStore(clock)
        pipeline = build(clock, store=store)
        reason = TimeoutRejectedError(timeout=1.0)

        def job() -> None:
            context = get_context()
            assert context is not None
            outer.signal.abort(reason)
            context.signal.raise_if_aborted()

        from resilience import ResilienceContext, Signal, use_context

        outer = ResilienceContext(signal=Signal())
        with use_context(outer), pytest.raises(TimeoutRejectedError) as caught:
            pipeline.execute(job)
        assert caught.value is reason

    async def test_async_results_follow_the_same_table(self, clock: FakeTimeProvider) -> None:
        """Async: v is returned; another error becomes LockLostError from it."""
        store = FaultyStore(clock)
        pipeline = build(clock, store=store, ttl=TTL)

        async def returns() -> str:
            store.steal("job")
            await astep(clock, TTL / 3)
            return "v"

        async def raises() -> None:
            store.steal("job", "other-thief")
            await astep(clock, TTL / 3)
            raise ValueError

        assert await pipeline.execute_async(returns) == "v"
        store.release("job", "thief")
        with pytest.raises(LockLostError) as caught:
            await pipeline.execute_async(raises)
        assert isinstance(caught.value.__cause__, ValueError)


class TestCancelOnLost:
    async def test_cancel_on_lost_cancels_the_async_callable(self, clock: FakeTimeProvider) -> None:
        """With cancel_on_lost the awaiting callable is cancelled and LockLostError raised."""
        store = FaultyStore(clock)
        reached: list[bool] = []

        async def job() -> None:
            store.steal("job")
            await asyncio.sleep(3600)
            reached.append(True)

        task = asyncio.ensure_future(build(clock, store=store, ttl=TTL, cancel_on_lost=True).execute_async(job))
        await astep(clock, TTL / 3)
        with pytest.raises(LockLostError):
            await asyncio.wait_for(task, 5)
        assert reached == []
        assert store.count("release") == 1

    async def test_without_cancel_on_lost_the_callable_runs_on(self, clock: FakeTimeProvider) -> None:
        """By default only the signal aborts: the callable decides."""
        store = FaultyStore(clock)
        gate = asyncio.Event()

        async def job() -> str:
            store.steal("job")
            await gate.wait()
            return "finished"

        task = asyncio.ensure_future(build(clock, store=store, ttl=TTL).execute_async(job))
        await astep(clock, TTL / 3)
        assert not task.done()
        gate.set()
        assert await task == "finished"

    async def test_cancel_on_lost_leaves_a_healthy_lease_alone(self, clock: FakeTimeProvider) -> None:
        """No loss, no cancellation."""

        async def job() -> str:
            await astep(clock, TTL)
            return "ok"

        assert await build(clock, ttl=TTL, cancel_on_lost=True).execute_async(job) == "ok"


class TestRelease:
    def test_exactly_one_release_per_owner(self, clock: FakeTimeProvider) -> None:
        """Success, failure and loss each end with one release for the execution's owner."""
        store = FaultyStore(clock)
        pipeline = build(clock, store=store, ttl=TTL)
        pipeline.execute(lambda: None)
        pipeline.settle(lambda: 1 / 0)
        pipeline.execute(lambda: (store.steal("job"), step(clock, TTL / 3)))
        acquired = store.owners("acquire")
        assert store.owners("release") == acquired

    def test_a_failed_release_is_ignored(self, clock: FakeTimeProvider) -> None:
        """The release raising does not change the result (the lease expires anyway)."""
        events = Events()
        store = FaultyStore(clock)
        store.release_error = ConnectionError("down")
        assert build(clock, events, store=store).execute(lambda: "v") == "v"
        assert "OnLockLost" not in events.names()

    async def test_a_failed_async_release_is_ignored(self, clock: FakeTimeProvider) -> None:
        """The async twin ignores a failed release too."""
        store = FaultyStore(clock)
        store.release_error = ConnectionError("down")

        async def job() -> str:
            return "v"

        assert await build(clock, store=store).execute_async(job) == "v"

    async def test_an_async_release_survives_the_callers_cancellation(self, clock: FakeTimeProvider) -> None:
        """Cancelled during the release: the cancellation propagates, the release still completes."""
        store = FaultyStore(clock)
        store.async_release_gate = gate = asyncio.Event()

        async def job() -> None:
            return None

        task = asyncio.ensure_future(build(clock, store=store).execute_async(job))
        await settle()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert store.count("release") == 0
        gate.set()
        await settle()
        assert store.count("release") == 1
        assert len(store) == 0

    async def test_a_hanging_async_release_is_abandoned(self, clock: FakeTimeProvider) -> None:
        """A release that never answers is abandoned after RELEASE_TIMEOUT on the clock."""
        store = FaultyStore(clock)
        store.async_release_gate = asyncio.Event()

        async def job() -> str:
            return "v"

        task = asyncio.ensure_future(build(clock, store=store).execute_async(job))
        await settle()
        assert not task.done()
        clock.advance(RELEASE_TIMEOUT)
        assert await asyncio.wait_for(task, 5) == "v"

    def test_renewal_stops_before_the_release(self, clock: FakeTimeProvider) -> None:
        """No renewal is sent once the callable ended; no timer is left behind."""
        store = FaultyStore(clock)
        build(clock, store=store, ttl=TTL).execute(lambda: step(clock, TTL / 3 + 0.01))
        calls = [call[0] for call in store.calls]
        step(clock, 3 * TTL)
        assert [call[0] for call in store.calls] == calls
        assert calls[-1] == "release"
        assert clock.pending_timers == 0


async def test_a_cancelled_async_callable_releases_and_propagates(clock: FakeTimeProvider) -> None:
    """Cancelling the caller mid-callable: the lease is released, CancelledError propagates."""
    store = FaultyStore(clock)
    events = Events()

    async def job() -> None:
        await asyncio.sleep(3600)

    task = asyncio.ensure_future(build(clock, events, store=store).execute_async(job))
    await settle()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert store.count("release") == 1
    assert events.names() == ["OnLockAcquired", "OnLockReleased"]


def test_a_one_ms_ttl_is_held_for_an_instant(clock: FakeTimeProvider) -> None:
    """ttl=1 ms: the margin is at most half the ttl, so an instant body holds the lease."""
    events = Events()

    def job() -> object:
        clock.advance(0)  # a fake clock runs what is due only when moved
        return _signal_reason()

    assert build(clock, events, ttl=0.001).execute(job) is None
    idle()
    assert "OnLockLost" not in events.names()


def test_a_one_ms_ttl_is_lost_after_half_of_it(clock: FakeTimeProvider) -> None:
    """ttl=1 ms without a renewal in time: lost at its local deadline (0.5 ms), and said so."""
    events = Events()
    lost: list[OnLockLostArguments] = []
    store = FaultyStore(clock)
    store.renew_error = ConnectionError("down")

    def job() -> object:
        clock.advance(0.0006)
        return _signal_reason()

    reason = build(clock, events, ttl=0.001, store=store, on_lock_lost=lost.append).execute(job)
    idle()
    assert isinstance(reason, LockLostError)
    assert len(lost) == 1
    assert events.names().count("OnLockLost") == 1


def test_the_holder_gives_up_before_a_rival_can_take_over(clock: FakeTimeProvider) -> None:
    """Renewals failing until the store expires the lease: the holder's signal aborts before any rival acquires."""
    store = FaultyStore(clock)
    store.renew_error = ConnectionError("partitioned")
    rival_got_it_at: list[float] = []
    aborted_at: list[float] = []

    def job() -> None:
        context = get_context()
        assert context is not None
        context.signal.add_callback(lambda _reason: aborted_at.append(clock.monotonic()))
        for _ in range(int(2 * TTL / 0.01)):
            step(clock, 0.01, dt=0.01)
            if MemoryLockStore.acquire(store, "job", "rival", TTL) is not None:
                rival_got_it_at.append(clock.monotonic())
                break

    build(clock, store=store, ttl=TTL).execute(job)
    idle()
    assert aborted_at
    assert rival_got_it_at
    assert aborted_at[0] < rival_got_it_at[0]
