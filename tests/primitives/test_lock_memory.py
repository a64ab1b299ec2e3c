"""`lock()` on a memory store under a fake clock: the lease policy of DESIGN §2.9, sync and async."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import TYPE_CHECKING

import pytest

from resilience import LockLeaseLostError, LockNotAcquiredError, ValidationError, get_lock_token
from resilience.primitives import LockHandle, lock
from resilience.stores import MemoryLockStore
from resilience.testing import capture_events
from tests.unit.lockkit import AsyncOnlyStore, FaultyStore, SyncOnlyStore, astep, idle, step

if TYPE_CHECKING:
    from resilience.testing import FakeTimeProvider

TTL = 4.0


def kinds(store: FaultyStore) -> list[str]:
    return [call[0] for call in store.calls]


class TestFailFastAndRetries:
    def test_run_fails_fast_when_held(self, clock: FakeTimeProvider) -> None:
        """retries=0: run raises LockNotAcquiredError with .key at once; the body never runs."""
        store = FaultyStore(clock)
        locks = lock(store, ttl=TTL)
        holder = locks.acquire("order:42")
        assert holder is not None
        ran: list[int] = []
        with pytest.raises(LockNotAcquiredError) as caught:
            locks.run("order:42", lambda h: ran.append(h.token))
        assert caught.value.key == "order:42"
        assert caught.value.retry_after == pytest.approx(TTL)
        assert not ran
        assert kinds(store) == ["acquire", "acquire"]

    def test_acquire_returns_none_when_held(self, clock: FakeTimeProvider) -> None:
        """A bare acquire of a held key answers None."""
        locks = lock(MemoryLockStore(clock))
        assert locks.acquire("k") is not None
        assert locks.acquire("k") is None

    def test_retries_are_a_bounded_spin(self, auto_clock: FakeTimeProvider) -> None:
        """retries=N tries N more times, retry_delay apart, then gives up."""
        store = FaultyStore(auto_clock)
        locks = lock(store)
        assert locks.acquire("k") is not None
        started = auto_clock.monotonic()
        assert locks.acquire("k", retries=3, retry_delay=0.25) is None
        assert auto_clock.monotonic() - started == pytest.approx(0.75)
        assert kinds(store).count("acquire") == 5

    def test_retries_get_the_lock_when_it_expires(self, auto_clock: FakeTimeProvider) -> None:
        """A retry after the holder's lease ran out takes the lock."""
        locks = lock(MemoryLockStore(auto_clock))
        assert locks.acquire("k", ttl=0.3) is not None
        assert locks.run("k", lambda h: h.token, retries=5, retry_delay=0.1) == 2

    def test_six_threads_fail_fast_one_runs(self) -> None:
        """Six concurrent callers, retries=0: one runs, five are rejected."""
        locks = lock(MemoryLockStore())
        barrier = threading.Barrier(6)
        ran: list[int] = []
        rejected: list[str] = []

        def caller() -> None:
            barrier.wait()
            try:
                locks.run("job", lambda h: ran.append(h.token) or time.sleep(0.1))
            except LockNotAcquiredError as exc:
                rejected.append(exc.key)

        threads = [threading.Thread(target=caller) for _ in range(6)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert len(ran) == 1
        assert rejected == ["job"] * 5

    def test_six_threads_with_retries_all_run_one_at_a_time(self) -> None:
        """Six callers with retries: all six run, never two at once (woken by the release)."""
        locks = lock(MemoryLockStore())
        inside = 0
        most = 0
        guard = threading.Lock()
        tokens: list[int] = []

        def body(handle: LockHandle) -> None:
            nonlocal inside, most
            with guard:
                inside += 1
                most = max(most, inside)
            time.sleep(0.01)
            with guard:
                inside -= 1
                tokens.append(handle.token)

        threads = [threading.Thread(target=locks.run, args=("job", body), kwargs={"retries": 100}) for _ in range(6)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert len(tokens) == 6
        assert most == 1


class TestHeartbeat:
    def test_default_heartbeat_is_a_quarter_of_the_ttl(self, clock: FakeTimeProvider) -> None:
        """run renews every ttl/4 while the body runs; the lease survives ten ttls."""
        store = FaultyStore(clock)

        def body(handle: LockHandle) -> bool:
            step(clock, 10 * TTL, dt=0.1)
            return handle.signal.aborted

        assert lock(store, ttl=TTL).run("k", body) is False
        assert 36 <= kinds(store).count("renew") <= 40  # renewals are timed from their send, on 0.1 s steps

    def test_explicit_heartbeat(self, clock: FakeTimeProvider) -> None:
        """heartbeat=1 with ttl=4 renews every second."""
        store = FaultyStore(clock)
        lock(store, ttl=TTL).run("k", lambda h: step(clock, 3.05), heartbeat=1)
        assert kinds(store).count("renew") == 3

    def test_leases_under_two_prefixes_on_one_store_renew_each_under_its_key(self, clock: FakeTimeProvider) -> None:
        """Two primitives on one store: their renewals share batches, each lease renewed under its own prefix."""
        batches: list[list[str]] = []

        class Recording(MemoryLockStore):
            def renew_many(self, items: list[tuple[str, str, float]]) -> list[bool | Exception]:
                batches.append(sorted(key for key, _, _ in items))
                return super().renew_many(items)

        store = Recording(clock)
        with lock(store, prefix="a", ttl=TTL).hold("k") as first, lock(store, prefix="b", ttl=TTL).hold("k") as second:
            step(clock, 3 * TTL, dt=0.1)
            assert ["a:k", "b:k"] in batches, batches
            for key, handle in (("a:k", first), ("b:k", second)):
                assert not handle.lost
                found = store.info(key)
                assert found is not None
                assert [holder.token for holder in found.holders] == [handle.token]
                assert found.holders[0].expires_in > TTL / 2

    def test_a_short_body_costs_no_renewal(self, clock: FakeTimeProvider) -> None:
        """A body that ends inside the first interval sends acquire and release only."""
        store = FaultyStore(clock)
        lock(store, ttl=TTL).run("k", lambda h: step(clock, TTL / 4 - 0.1))
        assert kinds(store) == ["acquire", "release"]

    @pytest.mark.parametrize("heartbeat", [True, 0, -1, 0.0, float("nan"), float("inf"), "1", 2.5])
    def test_bad_heartbeats_are_refused_before_the_lock_is_taken(
        self, clock: FakeTimeProvider, heartbeat: object
    ) -> None:
        """heartbeat must be None, False or a positive duration <= ttl/2."""
        store = FaultyStore(clock)
        with pytest.raises(ValidationError, match="heartbeat"):
            lock(store, ttl=TTL).run("k", lambda h: None, heartbeat=heartbeat)  # type: ignore[arg-type]
        with pytest.raises(ValidationError, match="heartbeat"):
            lock(store, ttl=TTL).hold("k", heartbeat=heartbeat)  # type: ignore[arg-type]
        assert store.calls == []

    def test_half_the_ttl_is_allowed_and_checked_against_the_call_ttl(self, clock: FakeTimeProvider) -> None:
        """The ttl/2 bound uses the effective ttl (the call's, else the primitive's)."""
        locks = lock(MemoryLockStore(clock), ttl=TTL)
        assert locks.run("k", lambda h: 1, heartbeat=2) == 1
        with pytest.raises(ValidationError, match=r"at most half of ttl \(0.5s\)"):
            locks.run("k", lambda h: 1, ttl=1, heartbeat=2)

    def test_default_heartbeat_for_a_tiny_ttl(self, clock: FakeTimeProvider) -> None:
        """The derived default stays max(1 ms, ttl/4): never refused."""
        assert lock(MemoryLockStore(clock), ttl=0.01).run("k", lambda h: 7, heartbeat=None) == 7

    def test_no_heartbeat_still_enforces_the_deadline(self, clock: FakeTimeProvider) -> None:
        """heartbeat=False: no renewal; a body outliving the ttl gets its signal aborted, run raises."""
        store = FaultyStore(clock)
        seen: list[BaseException | None] = []

        def body(handle: LockHandle) -> str:
            step(clock, TTL + 0.1)
            seen.append(handle.signal.reason)
            return "done"

        with pytest.raises(LockLeaseLostError) as caught:
            lock(store, ttl=TTL).run("k", body, heartbeat=False)
        assert seen == [caught.value]
        assert caught.value.key == "k"
        assert "renew" not in kinds(store)


class TestLoss:
    def test_loss_is_raised_even_when_the_body_returned(self, clock: FakeTimeProvider) -> None:
        """The key is stolen; the next renewal says so; run raises although the body returned."""
        store = FaultyStore(clock)
        aborted: list[bool] = []

        def body(handle: LockHandle) -> str:
            store.steal("lock:k")
            step(clock, TTL / 4 + 0.1)
            aborted.append(handle.signal.aborted)
            return "charged"

        with capture_events() as events:
            with pytest.raises(LockLeaseLostError) as caught:
                lock(store, ttl=TTL).run("k", body)
            idle()
        assert aborted == [True]
        assert caught.value.key == "k"
        assert caught.value.token == 1
        lost = [e for e in events if e.name == "OnLockLost"]
        assert len(lost) == 1
        assert lost[0].pipeline_name is None
        assert lost[0].strategy_name == "Lock"

    def test_a_final_release_answered_false_is_a_loss(self, clock: FakeTimeProvider) -> None:
        """The release's owner check is consulted: False means the lease had moved on."""
        store = FaultyStore(clock)
        store.release_answer = False
        with pytest.raises(LockLeaseLostError):
            lock(store).run("k", lambda h: 1)

    def test_the_abort_reason_propagates_unchanged(self, clock: FakeTimeProvider) -> None:
        """A body that raises the signal's reason gets that very error out of run."""
        store = FaultyStore(clock)
        reasons: list[BaseException | None] = []

        def body(handle: LockHandle) -> None:
            store.steal("lock:k")
            step(clock, TTL / 4 + 0.1)
            reasons.append(handle.signal.reason)
            handle.signal.raise_if_aborted()

        with pytest.raises(LockLeaseLostError) as caught:
            lock(store, ttl=TTL).run("k", body)
        assert caught.value is reasons[0]
        assert caught.value.__cause__ is None

    def test_another_error_after_a_loss_becomes_the_cause(self, clock: FakeTimeProvider) -> None:
        """A body that fails otherwise after a loss: LockLeaseLostError, raised from its error."""
        store = FaultyStore(clock)

        def body(handle: LockHandle) -> None:
            store.steal("lock:k")
            step(clock, TTL / 4 + 0.1)
            raise KeyError(handle.key)

        with pytest.raises(LockLeaseLostError) as caught:
            lock(store, ttl=TTL).run("k", body)
        assert isinstance(caught.value.__cause__, KeyError)

    def test_an_error_without_a_loss_propagates(self, clock: FakeTimeProvider) -> None:
        """No loss: the body's exception comes out unchanged and the key is released."""
        store = FaultyStore(clock)
        locks = lock(store)
        with pytest.raises(ZeroDivisionError):
            locks.run("k", lambda h: 1 / 0)
        assert locks.acquire("k") is not None

    def test_one_failed_renewal_is_not_a_loss(self, clock: FakeTimeProvider) -> None:
        """A renewal that raises tells on_renew_error; the next tick retries and the lease survives."""
        store = FaultyStore(clock)
        errors: list[Exception] = []
        blip = ConnectionError("blip")

        def body(handle: LockHandle) -> bool:
            store.renew_error = blip
            step(clock, TTL / 4 + 0.01, dt=0.01)
            store.renew_error = None
            step(clock, TTL, dt=0.1)
            return handle.signal.aborted

        with capture_events() as events:
            assert lock(store, ttl=TTL).run("k", body, on_renew_error=errors.append) is False
        assert errors == [blip]
        failed = [e for e in events if e.name == "OnLockRenewalFailed"]
        assert len(failed) == 1
        assert failed[0].outcome is not None
        assert failed[0].outcome.error is blip

    def test_a_self_released_handle_stops_renewal_and_is_not_a_loss(self, clock: FakeTimeProvider) -> None:
        """The body releases early: no renewal after that, no second release, no loss."""
        store = FaultyStore(clock)
        locks = lock(store, ttl=TTL)

        def body(handle: LockHandle) -> str:
            assert handle.release() is True
            assert handle.release() is False
            step(clock, 2 * TTL)
            return "early"

        with capture_events() as events:
            assert locks.run("k", body) == "early"
        assert kinds(store) == ["acquire", "release"]
        assert [e.name for e in events].count("OnLockReleased") == 1


class TestBareAcquire:
    def test_an_acquired_handle_is_never_renewed(self, clock: FakeTimeProvider) -> None:
        """No background renewal, no deadline watch: the signal stays quiet past the ttl."""
        store = FaultyStore(clock)
        handle = lock(store, ttl=TTL).acquire("k")
        assert handle is not None
        step(clock, 2 * TTL)
        assert "renew" not in kinds(store)
        assert not handle.signal.aborted
        assert handle.expires_in() == 0.0

    def test_extend_false_aborts_the_signal(self, clock: FakeTimeProvider) -> None:
        """Only your own extend() answered False aborts the handle's signal."""
        store = FaultyStore(clock)
        handle = lock(store, ttl=TTL).acquire("k")
        assert handle is not None
        store.steal("lock:k")
        assert handle.extend() is False
        assert isinstance(handle.signal.reason, LockLeaseLostError)
        assert handle.lost
        assert handle.release() is False

    def test_extend_after_its_own_release_is_false_and_aborts_nothing(self, clock: FakeTimeProvider) -> None:
        """As `extend`'s docstring and docs/primitives.md say: False, but nothing was lost."""
        handle = lock(MemoryLockStore(clock), ttl=TTL).acquire("k")
        assert handle is not None
        assert handle.release() is True
        assert handle.extend() is False
        assert not handle.signal.aborted
        assert not handle.lost
        assert "After this handle's own `release()` the answer is False too" in (LockHandle.extend.__doc__ or "")

    async def test_extend_async_after_its_own_release_is_false_and_aborts_nothing(
        self, clock: FakeTimeProvider
    ) -> None:
        handle = await lock(MemoryLockStore(clock), ttl=TTL).acquire_async("k")
        assert handle is not None
        assert await handle.release_async() is True
        assert await handle.extend_async() is False
        assert not handle.signal.aborted
        assert not handle.lost

    def test_extend_sets_the_expiry_to_now_plus_ttl(self, clock: FakeTimeProvider) -> None:
        """extend(ttl) pushes the deadline to now + ttl; extend() uses the lock's ttl."""
        store = MemoryLockStore(clock)
        handle = lock(store, ttl=TTL).acquire("k")
        assert handle is not None
        clock.advance(3)
        assert handle.expires_in() == pytest.approx(1, abs=0.05)
        assert handle.extend(10) is True
        assert handle.expires_in() == pytest.approx(10, abs=0.2)
        clock.advance(1)
        assert handle.extend() is True
        assert handle.expires_in() == pytest.approx(TTL, abs=0.1)
        assert store.acquire("lock:k", "other", 1) is None
        with pytest.raises(ValidationError, match="ttl"):
            handle.extend(0)
        assert handle.release() is True
        assert store.acquire("lock:k", "other", 1) is not None

    def test_a_handle_is_sync_or_async(self, clock: FakeTimeProvider) -> None:
        """A sync handle has no working _async methods (and says which to call)."""
        handle = lock(MemoryLockStore(clock)).acquire("k")
        assert handle is not None
        with pytest.raises(ValidationError, match=r"release\(\)"):
            asyncio.run(handle.release_async())
        with pytest.raises(ValidationError, match=r"extend\(\)"):
            asyncio.run(handle.extend_async())
        assert "token=1" in repr(handle)


class TestAmbientToken:
    def test_run_and_hold_set_the_ambient_token(self, clock: FakeTimeProvider) -> None:
        """get_lock_token() is the innermost lock's; the outer one comes back after."""
        locks = lock(MemoryLockStore(clock))
        assert get_lock_token() is None
        with locks.hold("outer") as outer:
            assert get_lock_token() == outer.token
            inner = locks.run("inner", lambda h: (h.token, get_lock_token()))
            assert inner[0] == inner[1] != outer.token
            assert get_lock_token() == outer.token
        assert get_lock_token() is None

    def test_a_bare_acquire_sets_no_token(self, clock: FakeTimeProvider) -> None:
        """acquire returns a handle but leaves the ambient context alone."""
        assert lock(MemoryLockStore(clock)).acquire("k") is not None
        assert get_lock_token() is None

    def test_a_hold_cannot_be_entered_twice_at_once(self, clock: FakeTimeProvider) -> None:
        """One LockHold holds once at a time; it can be reused after."""
        hold = lock(MemoryLockStore(clock)).hold("k")
        with hold, pytest.raises(ValidationError, match="already held"), hold:
            pass
        with hold as handle:
            assert handle.token == 2


class TestEvents:
    def test_the_lock_events_have_no_pipeline(self, clock: FakeTimeProvider) -> None:
        """Acquired, released and rejected go out through the telemetry, strategy name Lock."""
        locks = lock(MemoryLockStore(clock))
        with capture_events() as events:
            locks.run("k", lambda h: locks.acquire("k"))
        assert [e.name for e in events] == ["OnLockAcquired", "OnLockRejected", "OnLockReleased"]
        assert {e.pipeline_name for e in events} == {None}
        assert {e.strategy_name for e in events} == {"Lock"}

    def test_manual_release_and_rejection_events(self, clock: FakeTimeProvider) -> None:
        """A bare acquire reports its release; a rejected run reports OnLockRejected."""
        locks = lock(MemoryLockStore(clock))
        with capture_events() as events:
            handle = locks.acquire("k")
            assert handle is not None
            with pytest.raises(LockNotAcquiredError):
                locks.run("k", lambda h: None)
            handle.release()
        assert [e.name for e in events] == ["OnLockAcquired", "OnLockRejected", "OnLockReleased"]


class TestStores:
    def test_the_prefix_is_prepended_once_to_a_stores_keys(self, clock: FakeTimeProvider) -> None:
        """With a store, keys are <prefix>:<key>; errors and handles carry your key."""
        store = MemoryLockStore(clock)
        with lock(store, prefix="jobs").hold("order:42") as handle:
            assert handle.key == "order:42"
            assert store.acquire("jobs:order:42", "other", 1) is None
            assert store.acquire("order:42", "other", 1) is not None

    def test_a_memory_store_lends_its_clock(self, clock: FakeTimeProvider) -> None:
        """Without time_provider the primitive uses the memory store's clock; another clock is refused."""
        from resilience.testing import FakeTimeProvider as Fake

        store = MemoryLockStore(clock)
        assert lock(store, time_provider=clock).run("k", lambda h: h.expires_in()) == pytest.approx(30, abs=0.5)
        with pytest.raises(ValidationError, match="time_provider"):
            lock(store, time_provider=Fake())

    def test_an_async_only_store_refuses_sync_calls(self, clock: FakeTimeProvider) -> None:
        """A store without sync methods: run/acquire/hold-with raise ValidationError naming the remedy."""
        locks = lock(AsyncOnlyStore(MemoryLockStore(clock)))
        for call in (lambda: locks.run("k", lambda h: None), lambda: locks.acquire("k")):
            with pytest.raises(ValidationError, match=r"no sync client.*run_async|acquire_async"):
                call()

    async def test_a_sync_only_store_refuses_async_calls(self, clock: FakeTimeProvider) -> None:
        """A store without _async methods: run_async/acquire_async raise ValidationError."""
        locks = lock(SyncOnlyStore(MemoryLockStore(clock)))
        with pytest.raises(ValidationError, match=r"no asyncio client.*run\(\)"):
            await locks.run_async("k", _async_body)
        with pytest.raises(ValidationError, match=r"no asyncio client.*acquire\(\)"):
            await locks.acquire_async("k")
        assert locks.run("k", lambda h: h.token) == 1

    def test_a_semaphore_store_is_refused(self, clock: FakeTimeProvider) -> None:
        """lock() needs a lock store."""
        from resilience.stores import MemorySemaphoreStore

        with pytest.raises(ValidationError, match="semaphore store"):
            lock(MemorySemaphoreStore(clock))


async def _async_body(handle: LockHandle) -> int:
    await asyncio.sleep(0)
    return handle.token


class TestAsync:
    async def test_run_async_and_async_hold(self, clock: FakeTimeProvider) -> None:
        """The async twins: the handle, the token, the ambient token and its restoration."""
        locks = lock(MemoryLockStore(clock))
        assert await locks.run_async("k", _async_body) == 1
        async with locks.hold("k") as handle:
            assert get_lock_token() == handle.token == 2
        assert get_lock_token() is None

    async def test_async_renewal_and_loss(self, clock: FakeTimeProvider) -> None:
        """Renewal on loop timers; a stolen key aborts the signal and run_async raises."""
        store = FaultyStore(clock)
        locks = lock(store, ttl=TTL)

        async def long_body(handle: LockHandle) -> bool:
            await astep(clock, 2 * TTL, dt=0.1)
            return handle.signal.aborted

        assert await locks.run_async("k", long_body) is False
        assert kinds(store).count("renew") >= 7

        async def stolen(handle: LockHandle) -> str:
            store.steal("lock:k")
            await astep(clock, TTL / 4 + 0.1)
            assert handle.signal.aborted
            return "done"

        with pytest.raises(LockLeaseLostError):
            await locks.run_async("k", stolen)

    async def test_async_abort_reason_and_other_errors(self, clock: FakeTimeProvider) -> None:
        """async with hold: the abort reason passes unchanged, another error becomes the cause."""
        store = FaultyStore(clock)
        locks = lock(store, ttl=TTL)

        async def outlive(error: Exception | None) -> None:
            async with locks.hold("k", heartbeat=False) as handle:
                await astep(clock, TTL + 0.1)
                if error is not None:
                    raise error
                handle.signal.raise_if_aborted()

        with pytest.raises(LockLeaseLostError) as caught:
            await outlive(None)
        assert caught.value.__cause__ is None
        with pytest.raises(LockLeaseLostError) as chained:
            await outlive(RuntimeError())
        assert isinstance(chained.value.__cause__, RuntimeError)

    async def test_acquire_async_extend_async_release_async(self, clock: FakeTimeProvider) -> None:
        """The bare async handle: extend_async, release_async; sync methods refused."""
        store = FaultyStore(clock)
        locks = lock(store, ttl=TTL)
        handle = await locks.acquire_async("k")
        assert handle is not None
        assert await locks.acquire_async("k") is None
        with pytest.raises(ValidationError, match="release_async"):
            handle.release()
        with pytest.raises(ValidationError, match="extend_async"):
            handle.extend()
        assert await handle.extend_async(8) is True
        assert handle.expires_in() == pytest.approx(8, abs=0.2)
        assert await handle.release_async() is True
        handle = await locks.acquire_async("k")
        assert handle is not None
        store.steal("lock:k")
        assert await handle.extend_async() is False
        assert handle.signal.aborted

    async def test_async_on_renew_error_and_self_release(self, clock: FakeTimeProvider) -> None:
        """An async renewal error is reported (an async callback is awaited); a self-release ends quietly."""
        store = FaultyStore(clock)
        errors: list[Exception] = []

        async def on_error(exc: Exception) -> None:
            errors.append(exc)

        async def body(handle: LockHandle) -> str:
            store.renew_error = ConnectionError("blip")
            await astep(clock, TTL / 4 + 0.01, dt=0.01)
            store.renew_error = None
            assert await handle.release_async() is True
            await astep(clock, TTL)
            return "ok"

        assert await lock(store, ttl=TTL).run_async("k", body, on_renew_error=on_error) == "ok"
        assert len(errors) == 1
        assert kinds(store).count("release") == 1

    async def test_async_retries(self, clock: FakeTimeProvider) -> None:
        """run_async with retries waits and then runs (or raises LockNotAcquiredError)."""
        locks = lock(MemoryLockStore(clock))
        assert await locks.acquire_async("k", ttl=0.3) is not None
        waiting = asyncio.ensure_future(locks.run_async("k", _async_body, retries=5, retry_delay=0.1))
        await astep(clock, 0.5)
        assert await waiting == 2
        assert await locks.acquire_async("k") is not None
        refused = asyncio.ensure_future(locks.run_async("k", _async_body, retries=2, retry_delay=0.1))
        await astep(clock, 0.5)
        with pytest.raises(LockNotAcquiredError):
            await refused


class TestStoreShapes:
    def test_a_store_with_a_blocking_notification_only(self) -> None:
        """A store offering plain acquire and wait_released (no lease info): the prefix still applies."""
        from tests.unit.lockkit import NotifyingStore

        inner = MemoryLockStore()
        locks = lock(NotifyingStore(inner), prefix="p")
        holder = locks.acquire("k")
        assert holder is not None
        assert inner.acquire("p:k", "other", 1) is None
        assert locks.acquire("k", retries=1, retry_delay=0.01) is None
        assert holder.release()

    async def test_a_plain_async_store(self, clock: FakeTimeProvider) -> None:
        """An async store without lease info or notification: acquire_async through the prefix."""
        locks = lock(AsyncOnlyStore(MemoryLockStore(clock)))
        assert await locks.run_async("k", _async_body) == 1

    async def test_an_outer_abort_ends_the_wait(self, clock: FakeTimeProvider) -> None:
        """run inside use_context(signal=...): the lease's signal is a child of the ambient one."""
        from resilience import Signal, use_context

        locks = lock(MemoryLockStore(clock))
        outer = Signal()
        with use_context(signal=outer), locks.hold("k") as handle:
            outer.abort(KeyError("stop"))
            assert isinstance(handle.signal.reason, KeyError)


def test_acquire_honours_the_callers_signal() -> None:
    """acquire() takes no lock under an aborted signal, stops spinning when it aborts, and the handle does not follow it."""
    import threading as _threading

    from resilience import Signal, use_context
    from resilience.primitives import lock as _lock
    from resilience.stores import MemoryLockStore as _Store

    store = _Store()
    locks = _lock(store, ttl=5)
    aborted = Signal()
    aborted.abort(KeyError("gone"))
    with use_context(signal=aborted), pytest.raises(KeyError):
        locks.acquire("free")
    assert store.acquire("lock:free", "probe", 1) is not None  # nothing was taken

    store.acquire("lock:held", "someone-else", 5)
    caller = Signal()
    _threading.Timer(0.05, caller.abort, args=(KeyError("stop"),)).start()
    with use_context(signal=caller), pytest.raises(KeyError):
        locks.acquire("held", retries=1000, retry_delay=0.01)  # would spin ~10 s

    later = Signal()
    with use_context(signal=later):
        handle = locks.acquire("other")
    assert handle is not None
    later.abort()
    assert not handle.signal.aborted
    assert handle.release()


def test_locks_are_not_reentrant_across_the_primitive_and_the_strategy() -> None:
    """A key held by the execution chain, through either API, is refused at once instead of waiting on itself."""
    import time as _time

    from resilience import LockNotAcquiredError as _NotAcquired
    from resilience import ResiliencePipelineBuilder as _Builder
    from resilience.primitives import lock as _lock
    from resilience.stores import MemoryLockStore as _Store

    store = _Store()
    locks = _lock(store, ttl=5)
    pipeline = _Builder().add_lock("lock:k", store=store, wait=5).build()
    cases = [
        lambda: locks.run("k", lambda _h: pipeline.execute(lambda: "inner")),
        lambda: locks.run("k", lambda _h: locks.run("k", lambda _h2: 1, retries=500, retry_delay=0.01)),
        lambda: pipeline.execute(lambda: locks.run("k", lambda _h: 1, retries=500, retry_delay=0.01)),
    ]
    for case in cases:
        started = _time.monotonic()
        with pytest.raises(_NotAcquired, match="not reentrant"):
            case()
        assert _time.monotonic() - started < 3  # refused at once, not after a 5 s wait or spin
    assert locks.run("other", lambda _h: locks.run("k", lambda _h2: "different keys nest")) == "different keys nest"


def test_a_renewal_group_is_asked_about_the_prefixed_key() -> None:
    """A store that groups its keys by server (a Cluster) keeps doing so behind the primitive's prefix."""
    from resilience._lease._lease import _group
    from resilience.stores import MemoryLockStore

    class Grouped(MemoryLockStore):
        def renewal_group(self, key: str) -> object:
            return f"node-of-{key}"

    handle = lock(Grouped(), prefix="app").acquire("job")
    assert handle is not None
    assert (handle.key, handle._lease.store_key) == ("job", "app:job")
    assert _group(handle._lease) == "node-of-app:job"
    assert handle.release()
    assert lock(MemoryLockStore(), prefix="app")._ops.group is None  # a store without groups gets none
