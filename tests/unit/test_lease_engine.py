"""The lease engine with the primitives' parameter sets: handles, extend, release, semaphores."""

from __future__ import annotations

import asyncio
import logging

import pytest

from resilience import LockLostError, SemaphoreLeaseLostError, Signal
from resilience._lease import (
    AsyncLease,
    Lease,
    LeaseParams,
    LockOps,
    SemaphoreOps,
    SpinSchedule,
    acquire_lease,
    acquire_lease_async,
)
from resilience.stores import MemoryLockStore, MemorySemaphoreStore
from resilience.testing import FakeTimeProvider
from tests.unit.lockkit import FaultyStore, astep, idle, settle, step


def _acquire(store: object, clock: FakeTimeProvider, params: LeaseParams, key: str = "k", **kwargs: object) -> Lease:
    ops = store if isinstance(store, LockOps | SemaphoreOps) else LockOps(store)
    lease, _ = acquire_lease(
        ops, key, params=params, time_provider=clock, **{"schedule": None, "signal": None, **kwargs}
    )  # type: ignore[arg-type]
    assert lease is not None
    return lease


class TestHandle:
    def test_a_bare_handle_is_never_renewed_nor_watched(self, clock: FakeTimeProvider) -> None:
        """No renew interval, no deadline watch: only extend() False can abort its signal."""
        store = FaultyStore(clock)
        lease = _acquire(store, clock, LeaseParams(ttl=1.0, renew_interval=None, watch_deadline=False))
        step(clock, 5.0)
        assert store.count("renew") == 0
        assert not lease.signal.aborted
        assert lease.expires_in() == 0.0
        assert lease.extend() is False
        assert isinstance(lease.signal.reason, LockLostError)

    def test_extend_pushes_the_deadline_and_can_shorten_it(self, clock: FakeTimeProvider) -> None:
        """extend(ttl) sets the expiry to now + ttl, on the store and locally."""
        store = FaultyStore(clock)
        lease = _acquire(store, clock, LeaseParams(ttl=10.0, renew_interval=None))
        clock.advance(5.0)
        assert lease.extend(20.0) is True
        assert lease.expires_in() == pytest.approx(20.0 - 0.2)
        assert lease.ttl == 20.0
        assert lease.extend(1.0) is True
        assert lease.expires_in() == pytest.approx(1.0 - 0.01)
        clock.advance(1.0)
        assert isinstance(lease.signal.reason, LockLostError)  # the shorter deadline was re-armed

    def test_heartbeat_disabled_still_enforces_the_deadline(self, clock: FakeTimeProvider) -> None:
        """heartbeat=False: no renewal, but a body that outlives the ttl loses the lease."""
        lease = _acquire(FaultyStore(clock), clock, LeaseParams(ttl=1.0, renew_interval=None))
        clock.advance(1.0)
        assert lease.lost
        assert lease.finish() is lease.error

    def test_release_by_the_holder_skips_the_final_release(self, clock: FakeTimeProvider) -> None:
        """A handle released by its body stops renewal; finish() sends nothing and reports no loss."""
        store = FaultyStore(clock)
        lease = _acquire(store, clock, LeaseParams(ttl=3.0, renew_interval=0.75))
        assert lease.release() is True
        assert lease.release() is False
        assert lease.extend() is False
        step(clock, 5.0)
        assert lease.finish() is None
        assert store.count("release") == 1
        assert store.count("renew") == 0

    def test_renew_errors_reach_on_renew_error(self, clock: FakeTimeProvider) -> None:
        """One failed renewal is not a loss: on_renew_error is told and the next tick retries."""
        store = FaultyStore(clock)
        seen: list[Exception] = []
        store.renew_error = ConnectionError("blip")
        lease = _acquire(
            store, clock, LeaseParams(ttl=3.0, renew_interval=0.75, on_renew_error=lambda _l, exc: seen.append(exc))
        )
        step(clock, 0.8)
        store.renew_error = None
        step(clock, 1.0)
        assert seen
        assert not lease.lost
        assert lease.finish() is None

    def test_the_loss_error_type_is_a_parameter(self, clock: FakeTimeProvider) -> None:
        """Semaphores lose with SemaphoreLeaseLostError, on a semaphore store."""
        store = MemorySemaphoreStore(clock)
        params = LeaseParams(ttl=3.0, renew_interval=1.0, error_type=SemaphoreLeaseLostError)
        first = _acquire(SemaphoreOps(store, 2), clock, params)
        second = _acquire(SemaphoreOps(store, 2), clock, params)
        third, held_for = acquire_lease(
            SemaphoreOps(store, 2), "k", params=params, schedule=None, time_provider=clock, signal=None
        )
        assert third is None
        assert held_for == pytest.approx(3.0)
        assert first.token != second.token
        with store._mutex:
            store._holders.clear()
        step(clock, 1.0)
        assert isinstance(first.error, SemaphoreLeaseLostError)
        assert first.finish() is first.error
        assert second.finish() is second.error

    def test_a_spin_schedule_retries_then_gives_up(self, clock: FakeTimeProvider) -> None:
        """The primitives' retries/retry_delay: a bounded spin on the clock."""
        store = MemoryLockStore(clock)
        store.acquire("k", "holder", 30.0)
        clock_sleeps = FakeTimeProvider(auto_advance=True)
        lease, _ = acquire_lease(
            LockOps(MemoryLockStore(clock_sleeps)),
            "k",
            params=LeaseParams(ttl=1.0, renew_interval=None),
            schedule=SpinSchedule(3, 0.1),
            time_provider=clock_sleeps,
            signal=None,
        )
        assert lease is not None  # free on that store
        assert lease.finish() is None

    def test_the_loss_signal_only_follows_the_lease(self, clock: FakeTimeProvider) -> None:
        """loss_signal() aborts on loss, not when the parent aborts; late callers see it aborted."""
        parent = Signal()
        lease = _acquire(FaultyStore(clock), clock, LeaseParams(ttl=1.0, renew_interval=None), signal=parent)
        loss = lease.loss_signal()
        parent.abort()
        assert lease.signal.aborted
        assert not loss.aborted
        clock.advance(1.0)
        assert isinstance(loss.reason, LockLostError)
        assert lease.loss_signal() is loss
        assert "lost" in repr(lease)

    def test_repr_shows_the_state(self, clock: FakeTimeProvider) -> None:
        """A lease describes its key, token and state."""
        lease = _acquire(FaultyStore(clock), clock, LeaseParams(ttl=1.0, renew_interval=None))
        assert repr(lease) == "<Lease key='k' token=1 held>"
        lease.finish()
        assert repr(lease) == "<Lease key='k' token=1 ended>"
        assert lease._machine.ended
        assert lease._machine.deadline == pytest.approx(0.99)

    def test_an_acquired_lease_under_an_aborted_signal_is_given_back(self, clock: FakeTimeProvider) -> None:
        """A signal that aborts during the acquire call: the lease is released, the reason raised."""
        store = FaultyStore(clock)
        signal = Signal()
        original = store.acquire_or_ttl

        def acquire_then_abort(key: str, owner: str, ttl: float) -> tuple[int | None, float | None]:
            result = original(key, owner, ttl)
            signal.abort()
            return result

        store.acquire_or_ttl = acquire_then_abort  # type: ignore[method-assign]
        with pytest.raises(Exception, match="aborted"):
            acquire_lease(
                LockOps(store),
                "k",
                params=LeaseParams(ttl=1.0, renew_interval=None),
                schedule=None,
                time_provider=clock,
                signal=signal,
            )
        assert store.count("release") == 1
        assert len(store) == 0

    def test_a_sync_renew_error_hook_that_raises_is_logged(
        self, clock: FakeTimeProvider, caplog: pytest.LogCaptureFixture
    ) -> None:
        """Exceptions of a lease callback are logged, never raised."""
        store = FaultyStore(clock)
        store.renew_error = ConnectionError("blip")

        def hook(_lease: object, _exc: Exception) -> None:
            raise RuntimeError("hook")

        with caplog.at_level(logging.ERROR, logger="resilience"):
            lease = _acquire(store, clock, LeaseParams(ttl=3.0, renew_interval=1.0, on_renew_error=hook))
            step(clock, 1.0)
            idle()
        assert "a lease callback raised" in caplog.text
        lease.finish()


class TestAsyncHandle:
    async def test_extend_and_release_async(self, clock: FakeTimeProvider) -> None:
        """The async handle extends and releases like the sync one."""
        store = FaultyStore(clock)
        lease, _ = await acquire_lease_async(
            LockOps(store),
            "k",
            params=LeaseParams(ttl=1.0, renew_interval=None, watch_deadline=False),
            schedule=None,
            time_provider=clock,
            signal=None,
        )
        assert isinstance(lease, AsyncLease)
        assert await lease.extend_async(5.0) is True
        assert lease.expires_in() == pytest.approx(5.0 - 0.05)
        assert await lease.release_async() is True
        assert await lease.release_async() is False
        assert await lease.extend_async() is False
        assert await lease.finish_async() is None
        assert store.count("release") == 1

    async def test_extend_async_false_aborts_the_signal(self, clock: FakeTimeProvider) -> None:
        """extend_async answering False is a loss."""
        store = FaultyStore(clock)
        lease, _ = await acquire_lease_async(
            LockOps(store),
            "k",
            params=LeaseParams(ttl=1.0, renew_interval=None),
            schedule=None,
            time_provider=clock,
            signal=None,
        )
        assert lease is not None
        store.steal("k")
        assert await lease.extend_async() is False
        assert isinstance(lease.signal.reason, LockLostError)
        assert await lease.finish_async() is lease.error

    async def test_async_spin_schedule_without_a_signal(self, clock: FakeTimeProvider) -> None:
        """A primitive acquisition without a signal sleeps between attempts and gives up."""
        store = MemoryLockStore(clock)
        store.acquire("k", "holder", 30.0)
        task = asyncio.ensure_future(
            acquire_lease_async(
                LockOps(store),
                "k",
                params=LeaseParams(ttl=1.0, renew_interval=None),
                schedule=SpinSchedule(2, 0.1),
                time_provider=clock,
                signal=None,
            )
        )
        while not task.done():
            await astep(clock, 0.1)
        assert task.result() == (None, pytest.approx(29.8))

    async def test_async_renew_error_hook(self, clock: FakeTimeProvider) -> None:
        """on_renew_error is told on the loop; an awaitable it returns is awaited."""
        store = FaultyStore(clock)
        store.renew_error = ConnectionError("blip")
        seen: list[Exception] = []

        async def hook(_lease: object, exc: Exception) -> None:
            seen.append(exc)

        lease, _ = await acquire_lease_async(
            LockOps(store),
            "k",
            params=LeaseParams(ttl=3.0, renew_interval=1.0, on_renew_error=hook),
            schedule=None,
            time_provider=clock,
            signal=None,
        )
        assert lease is not None
        await astep(clock, 1.0)
        await settle()
        assert seen
        await lease.finish_async()


class TestScheduler:
    def test_leases_that_end_before_their_first_event_leave_nothing_behind(self, clock: FakeTimeProvider) -> None:
        """Thousands of short executions, interleaved or not, leave no entry in the scheduler."""
        from resilience._lease._lease import scheduler_for

        store = MemoryLockStore(clock)
        params = LeaseParams(ttl=30.0, renew_interval=10.0)
        for n in range(2500):
            _acquire(store, clock, params, key=f"k{n}").finish()
            first, second = _acquire(store, clock, params, key="a"), _acquire(store, clock, params, key="b")
            first.finish()
            second.finish()
        assert (scheduler_for(clock)._heap, scheduler_for(clock).young) == ([], {})
        assert len(store) == 0

    def test_a_young_lease_still_held_at_the_tick_is_renewed(self, clock: FakeTimeProvider) -> None:
        """A lease held across the timer's tick moves from the young into the heap, and renews there."""
        from resilience._lease._lease import scheduler_for

        store = FaultyStore(clock)
        params = LeaseParams(ttl=3.0, renew_interval=1.0)
        short = _acquire(store, clock, params, key="short")
        lease = _acquire(store, clock, params, key="long")
        short.finish()
        assert len(scheduler_for(clock).young) == 1
        step(clock, 2.5)
        assert store.count("renew") >= 2
        assert not scheduler_for(clock).young
        assert lease.finish() is None

    def test_a_young_lease_extended_shorter_keeps_its_deadline_watched(self, clock: FakeTimeProvider) -> None:
        """`extend` re-arms a young lease earlier (a heap entry of its own): its deadline still aborts it."""
        store = FaultyStore(clock)
        lease = _acquire(store, clock, LeaseParams(ttl=30.0, renew_interval=None))
        assert lease.extend(1.0)
        step(clock, 1.5)
        assert lease.signal.aborted
        assert isinstance(lease.finish(), LockLostError)

    def test_a_young_lease_extended_leaves_the_young_for_the_heap_and_its_entry_is_counted_stale(
        self, clock: FakeTimeProvider
    ) -> None:
        """Re-armed while young, a lease has one event, in the heap; ended, that entry counts as stale."""
        from resilience._lease._lease import scheduler_for

        scheduler = scheduler_for(clock)
        lease = _acquire(FaultyStore(clock), clock, LeaseParams(ttl=30.0, renew_interval=None))
        assert lease.extend(3.0)
        assert (len(scheduler.young), len(scheduler._heap)) == (0, 1)
        stale = scheduler.stale
        assert lease.finish() is None
        assert scheduler.stale == stale + 1

    def test_one_scheduler_per_clock(self, clock: FakeTimeProvider) -> None:
        """The system clock (not weakly referenceable) and fake clocks each get one scheduler."""
        from resilience._lease._lease import scheduler_for
        from resilience._time import SYSTEM_TIME

        assert scheduler_for(SYSTEM_TIME) is scheduler_for(SYSTEM_TIME)
        assert scheduler_for(clock) is scheduler_for(clock)
        assert scheduler_for(clock) is not scheduler_for(FakeTimeProvider())


class TestHooks:
    def test_a_sync_hook_returning_an_awaitable_is_closed(
        self, clock: FakeTimeProvider, caplog: pytest.LogCaptureFixture
    ) -> None:
        """An async on_renew_error in a sync lease is closed and logged."""
        store = FaultyStore(clock)
        store.renew_error = ConnectionError("blip")

        async def hook(_lease: object, _exc: Exception) -> None:
            raise AssertionError

        with caplog.at_level(logging.ERROR, logger="resilience"):
            lease = _acquire(store, clock, LeaseParams(ttl=3.0, renew_interval=1.0, on_renew_error=hook))
            step(clock, 1.0)
        assert "returned an awaitable" in caplog.text
        lease.finish()

    async def test_an_async_hook_that_raises_is_logged(
        self, clock: FakeTimeProvider, caplog: pytest.LogCaptureFixture
    ) -> None:
        """Exceptions of an async lease callback are logged."""
        store = FaultyStore(clock)
        store.renew_error = ConnectionError("blip")

        def hook(_lease: object, _exc: Exception) -> None:
            raise RuntimeError("hook")

        with caplog.at_level(logging.ERROR, logger="resilience"):
            lease, _ = await acquire_lease_async(
                LockOps(store),
                "k",
                params=LeaseParams(ttl=3.0, renew_interval=1.0, on_renew_error=hook),
                schedule=None,
                time_provider=clock,
                signal=None,
            )
            assert lease is not None
            await astep(clock, 1.0)
            await settle()
        assert "a lease callback raised" in caplog.text
        await lease.finish_async()

    @pytest.mark.parametrize("error", [RuntimeError("job"), SystemExit(1), KeyboardInterrupt()])
    def test_pool_job_errors_are_logged(self, caplog: pytest.LogCaptureFixture, error: BaseException) -> None:
        """A job that raises (even SystemExit) on a pool thread is logged and the pool goes on."""
        from resilience._lease._workers import CALLBACKS

        def boom() -> None:
            raise error

        with caplog.at_level(logging.ERROR, logger="resilience"):
            CALLBACKS.submit(boom)
            idle()
            ran: list[bool] = []
            CALLBACKS.submit(lambda: ran.append(True))
            idle()
        assert ran == [True]
        assert "lease-callbacks raised" in caplog.text


class TestAsyncEdges:
    async def test_a_clock_advanced_from_another_thread_reaches_the_loop(self, clock: FakeTimeProvider) -> None:
        """Timers fired on another thread hop onto the lease's loop; the loss is seen there."""
        store = FaultyStore(clock)
        lease, _ = await acquire_lease_async(
            LockOps(store),
            "k",
            params=LeaseParams(ttl=1.0, renew_interval=None),
            schedule=None,
            time_provider=clock,
            signal=None,
        )
        assert lease is not None
        await asyncio.to_thread(clock.advance, 1.0)
        await settle()
        assert lease.lost
        assert await lease.finish_async() is lease.error

    async def test_a_hanging_release_abandoned_from_another_thread(self, clock: FakeTimeProvider) -> None:
        """The release bound fires on the advancing thread and hops onto the loop."""
        store = FaultyStore(clock)
        store.async_release_gate = asyncio.Event()
        lease, _ = await acquire_lease_async(
            LockOps(store),
            "k",
            params=LeaseParams(ttl=30.0, renew_interval=None),
            schedule=None,
            time_provider=clock,
            signal=None,
        )
        assert lease is not None
        finishing = asyncio.ensure_future(lease.finish_async())
        await settle()
        from resilience._lease import RELEASE_TIMEOUT

        await asyncio.to_thread(clock.advance, RELEASE_TIMEOUT)
        assert await asyncio.wait_for(finishing, 5) is None

    async def test_a_release_that_fails_after_suspending_is_ignored(self, clock: FakeTimeProvider) -> None:
        """A release error after the store suspended still counts as released."""
        store = FaultyStore(clock)
        gate = store.async_release_gate = asyncio.Event()
        store.release_error = ConnectionError("down")
        lease, _ = await acquire_lease_async(
            LockOps(store),
            "k",
            params=LeaseParams(ttl=30.0, renew_interval=None),
            schedule=None,
            time_provider=clock,
            signal=None,
        )
        assert lease is not None
        finishing = asyncio.ensure_future(lease.finish_async())
        await settle()
        gate.set()
        assert await asyncio.wait_for(finishing, 5) is None

    async def test_an_acquired_lease_under_an_aborted_signal_is_given_back_async(self, clock: FakeTimeProvider) -> None:
        """Async: the signal aborting during acquire releases the lease in the background."""
        store = FaultyStore(clock)
        signal = Signal()
        original = store.acquire_or_ttl

        def acquire_then_abort(key: str, owner: str, ttl: float) -> tuple[int | None, float | None]:
            result = original(key, owner, ttl)
            signal.abort()
            return result

        store.acquire_or_ttl = acquire_then_abort  # type: ignore[method-assign]
        with pytest.raises(Exception, match="aborted"):
            await acquire_lease_async(
                LockOps(store),
                "k",
                params=LeaseParams(ttl=1.0, renew_interval=None),
                schedule=None,
                time_provider=clock,
                signal=signal,
            )
        await settle()
        assert store.count("release") == 1

    async def test_semaphore_ops_async_with_and_without_lease_info(self, clock: FakeTimeProvider) -> None:
        """SemaphoreOps drives the async semaphore protocol, with or without lease info."""
        store = MemorySemaphoreStore(clock)
        params = LeaseParams(ttl=3.0, renew_interval=None)
        first, _ = await acquire_lease_async(
            SemaphoreOps(store, 1), "k", params=params, schedule=None, time_provider=clock, signal=None
        )
        assert first is not None
        ops = SemaphoreOps(store, 1)
        ops.lease_info = ops.lease_info_async = False
        second, held_for = await acquire_lease_async(
            ops, "k", params=params, schedule=None, time_provider=clock, signal=None
        )
        assert second is None
        assert held_for is None
        assert ops.acquire("k", "x", 1.0) == (None, None)
        assert await first.finish_async() is None

    async def test_semaphore_wait_released(self, clock: FakeTimeProvider) -> None:
        """A semaphore waiter is woken when a slot is released."""
        store = MemorySemaphoreStore(clock)
        assert await store.wait_released_async("k", 1.0) is True
        store.acquire("k", "a", 30.0, 1)
        waiting = asyncio.ensure_future(store.wait_released_async("k", 30.0))
        await settle()
        assert not waiting.done()
        store.release("k", "a")
        assert await asyncio.wait_for(waiting, 5) is True
        assert await store.acquire_or_ttl_async("k", "b", 1.0, 1) == (2, None)
