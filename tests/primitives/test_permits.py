"""`semaphore(...)` permits on the memory store (DESIGN §2.21): options, atomic takes, FIFO, wake-ups.

The stores' own permit rules run in the conformance suite (tests/stores/conformance.py) on
every store; the Redis wake-up count in tests/redis/test_semaphore_permits.py.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import TYPE_CHECKING, Any

import pytest

from resilience import ValidationError, get_lock_token
from resilience.primitives import semaphore
from resilience.stores import MemorySemaphoreStore, SupportsPermits, serves

if TYPE_CHECKING:
    from collections.abc import Callable

    from resilience.primitives import LockHandle
    from resilience.testing import FakeTimeProvider


class CountingStore(MemorySemaphoreStore):
    """A memory semaphore store that counts the calls made to it."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.calls = 0

    def acquire(self, *args: Any, **kwargs: Any) -> int | None:
        self.calls += 1
        return super().acquire(*args, **kwargs)

    def acquire_or_ttl(self, *args: Any, **kwargs: Any) -> tuple[int | None, float | None]:
        self.calls += 1
        return super().acquire_or_ttl(*args, **kwargs)

    def acquire_or_queue(self, *args: Any, **kwargs: Any) -> tuple[int | None, float | None]:
        self.calls += 1
        return super().acquire_or_queue(*args, **kwargs)


class OneSlotEach:
    """A third-party semaphore store whose holders take one slot each (no `SupportsPermits`)."""

    def __init__(self) -> None:
        self.inner = MemorySemaphoreStore()
        self.calls = 0

    def acquire(self, key: str, owner: str, ttl: float, limit: int) -> int | None:
        self.calls += 1
        return self.inner.acquire(key, owner, ttl, limit)

    def renew(self, key: str, owner: str, ttl: float) -> bool:
        return self.inner.renew(key, owner, ttl)

    def release(self, key: str, owner: str) -> bool:
        return self.inner.release(key, owner)

    async def acquire_async(self, key: str, owner: str, ttl: float, limit: int) -> int | None:
        self.calls += 1
        return self.inner.acquire(key, owner, ttl, limit)

    async def renew_async(self, key: str, owner: str, ttl: float) -> bool:
        return self.inner.renew(key, owner, ttl)

    async def release_async(self, key: str, owner: str) -> bool:
        return self.inner.release(key, owner)


BAD_PERMITS = [0, -1, 4, True, 1.0, "2", None]


class TestOptions:
    @pytest.mark.parametrize("permits", BAD_PERMITS)
    def test_bad_permits_are_refused_before_any_store_call(self, permits: object) -> None:
        store = CountingStore()
        slots = semaphore(store, limit=3)
        calls: list[Callable[[], object]] = [
            lambda: slots.acquire("k", permits=permits),  # type: ignore[arg-type]
            lambda: slots.run("k", lambda _h: None, permits=permits),  # type: ignore[arg-type]
            lambda: slots.hold("k", permits=permits),  # type: ignore[arg-type]
            lambda: asyncio.run(slots.acquire_async("k", permits=permits)),  # type: ignore[arg-type]
            lambda: asyncio.run(slots.run_async("k", _nothing, permits=permits)),  # type: ignore[arg-type]
        ]
        for call in calls:
            with pytest.raises(ValidationError, match=r"permits: must be an int between 1 and the limit \(3\)"):
                call()
        assert store.calls == 0
        assert store.holders("semaphore:k") == []

    def test_a_store_without_permits_refuses_more_than_one_before_any_call(self) -> None:
        store = OneSlotEach()
        assert not serves(store, SupportsPermits)
        slots = semaphore(store, limit=3)
        with pytest.raises(ValidationError, match=r"permits: .* does not implement SupportsPermits"):
            slots.acquire("k", permits=2)
        with (
            pytest.raises(ValidationError, match=r"permits: .* does not implement SupportsPermits"),
            slots.hold("k", permits=3),
        ):
            pass
        with pytest.raises(ValidationError, match=r"permits: .* does not implement AsyncSupportsPermits"):
            asyncio.run(slots.acquire_async("k", permits=2))
        assert store.calls == 0
        handle = slots.acquire("k")  # one slot each: still served
        assert handle is not None
        assert handle.release()

    def test_the_prefixing_view_does_not_hide_a_missing_capability(self) -> None:
        """`semaphore(store)` wraps the store; the wrapper's `*args` must not pass for `SupportsPermits`."""
        slots = semaphore(OneSlotEach(), limit=2, prefix="p")
        with pytest.raises(ValidationError, match="permits"):
            slots.acquire("k", permits=2)


async def _nothing(_handle: LockHandle) -> None:
    return None


class TestAtomicTake:
    def test_permits_are_taken_together_and_counted_until_released(self, clock: FakeTimeProvider) -> None:
        store = MemorySemaphoreStore(clock)
        slots = semaphore(store, limit=4, time_provider=clock)
        big = slots.acquire("k", permits=3)
        assert big is not None
        assert slots.acquire("k", permits=2) is None  # two asked, one free: none taken
        small = slots.acquire("k")
        assert small is not None
        assert slots.acquire("k") is None
        assert [(token, permits) for _, token, _, permits in store.holders("semaphore:k")] == [
            (big.token, 3),
            (small.token, 1),
        ]
        assert big.release()
        assert slots.acquire("k", permits=3) is not None
        assert small.release()

    def test_run_holds_its_permits_with_its_own_token(self, clock: FakeTimeProvider) -> None:
        store = MemorySemaphoreStore(clock)
        slots = semaphore(store, limit=2, time_provider=clock)

        def body(handle: LockHandle) -> int:
            assert get_lock_token() == handle.token
            assert slots.acquire("k") is None  # both slots are the body's
            return handle.token

        token = slots.run("k", body, permits=2)
        assert slots.run("k", lambda handle: handle.token, permits=2) > token

    async def test_async_twins_take_permits(self, clock: FakeTimeProvider) -> None:
        store = MemorySemaphoreStore(clock)
        slots = semaphore(store, limit=3, time_provider=clock)
        handle = await slots.acquire_async("k", permits=2)
        assert handle is not None
        assert await slots.acquire_async("k", permits=2) is None
        async with slots.hold("k", permits=1) as other:
            assert other.token > handle.token
            assert await slots.acquire_async("k") is None
        assert await handle.release_async()

        async def body(inner: LockHandle) -> int:
            return inner.token

        assert await slots.run_async("k", body, permits=3) > handle.token


class TestFairness:
    def test_a_big_request_at_the_head_is_not_overtaken_by_later_small_ones(self) -> None:
        store = MemorySemaphoreStore()
        slots = semaphore(store, limit=3, ttl=10)
        holder = slots.acquire("k", permits=2)  # one slot stays free all along
        assert holder is not None
        order: list[str] = []
        threads = []
        for count, (name, permits) in enumerate([("big", 3), ("s1", 1), ("s2", 1)], start=1):

            def waiter(name: str = name, permits: int = permits) -> None:
                slots.run("k", lambda _h: order.append(name), wait=30, permits=permits)

            threads.append(threading.Thread(target=waiter))
            threads[-1].start()
            deadline = time.monotonic() + 10
            while len(store._queues.get("semaphore:k", {})) < count:  # queued, one after another
                assert time.monotonic() < deadline, f"{name} never queued"
                time.sleep(0.002)
        assert order == []  # the free slot went to nobody: the big request at the head waits for it
        assert holder.release()
        for thread in threads:
            thread.join(30)
        assert order[0] == "big", order
        assert sorted(order[1:]) == ["s1", "s2"]

    def test_a_release_wakes_only_the_waiters_its_slots_serve(self) -> None:
        """Each waiter's listener counts its wake-ups: freeing 2 slots of 6 waiters wakes 2."""
        store = MemorySemaphoreStore()
        assert store.acquire("k", "holder", 30, 2, 2) is not None
        woken: list[str] = []
        for index in range(6):
            owner = f"w{index}"
            assert store.acquire_or_queue("k", owner, 30, 2)[0] is None
            store.add_release_listener("k", lambda owner=owner: woken.append(owner), owner)
        assert store.release("k", "holder") is True
        assert woken == ["w0", "w1"]

    def test_a_release_also_announces_the_slots_of_a_lapsed_holder(self, clock: FakeTimeProvider) -> None:
        """A holder whose lease ran out announced nothing: the next release names the waiters its slots serve too."""
        store = MemorySemaphoreStore(clock)
        assert store.acquire("k", "lapsed", 1, 3, 2) is not None
        assert store.acquire("k", "holder", 30, 3) is not None
        woken: list[str] = []
        for owner in ("w0", "w1", "w2", "w3"):
            assert store.acquire_or_queue("k", owner, 30, 3)[0] is None
            store.add_release_listener("k", lambda owner=owner: woken.append(owner), owner)
        clock.advance(2)  # "lapsed" expires: 2 slots free, unannounced (the waiters' entries live on: 3 s)
        assert store.release("k", "holder") is True
        assert woken == ["w0", "w1", "w2"]
