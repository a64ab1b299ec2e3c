"""Renewals of many leases go out in batches: one store call and one timer wake-up for many leases.

What lets one process hold 10,000 leases on a 1 s ttl (`tests/reliability/test_lease_scale.py`,
`make soak`): here the same mechanism on a fake clock, in milliseconds.
"""

from __future__ import annotations

import asyncio
import threading
from typing import TYPE_CHECKING

from resilience._lease import LeaseParams, LockOps, acquire_lease, acquire_lease_async
from resilience._lease._lease import BATCH
from resilience.stores import AsyncSupportsRenewMany, MemoryLockStore, SupportsRenewMany
from tests.unit.lockkit import FaultyStore, astep, idle, step

if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any

    from resilience.testing import FakeTimeProvider

LEASES = 2 * BATCH + 10


class CountingStore(MemoryLockStore):
    """Counts the store calls of renewals."""

    def __init__(self, clock: FakeTimeProvider) -> None:
        super().__init__(clock)
        self.batches: list[int] = []
        self.single = 0

    def renew_many(self, items: Sequence[tuple[str, str, float]]) -> list[bool | Exception]:
        self.batches.append(len(items))
        return super().renew_many(items)

    def renew(self, key: str, owner: str, ttl: float) -> bool:
        self.single += 1
        return super().renew(key, owner, ttl)


def test_the_memory_stores_renew_many_at_once() -> None:
    """`renew_many` is the optional capability the runtime batches with; each answer is `renew`'s."""
    store = MemoryLockStore()
    assert isinstance(store, SupportsRenewMany)
    store.acquire("a", "me", 10.0)
    store.acquire("b", "other", 10.0)
    assert store.renew_many([("a", "me", 5.0), ("b", "me", 5.0), ("c", "me", 5.0)]) == [True, False, False]


def test_due_renewals_of_one_store_go_out_in_few_calls(clock: FakeTimeProvider) -> None:
    """Leases acquired within a few milliseconds are renewed together, at most `BATCH` per call."""
    store = CountingStore(clock)
    params = LeaseParams(ttl=3.0, renew_interval=1.0)
    leases = []
    for n in range(LEASES):
        lease, _ = acquire_lease(
            LockOps(store), f"k{n}", params=params, schedule=None, time_provider=clock, signal=None
        )
        assert lease is not None
        leases.append(lease)
    step(clock, 5.01)
    idle()
    assert store.single == 0
    rounds, rest = divmod(sum(store.batches), LEASES)
    assert rest == 0
    assert rounds >= 4  # every 1 s (from each send time, a step's 50 ms late at most)
    assert len(store.batches) == rounds * 3  # each round: two full batches and the rest
    assert max(store.batches) == BATCH
    assert not any(lease.lost for lease in leases)
    assert all(lease.expires_in() > 1.5 for lease in leases)
    for lease in leases:
        assert lease.finish() is None


async def test_async_renewals_on_an_in_process_store_are_batched_on_the_loop(clock: FakeTimeProvider) -> None:
    """The async runtime sends a batch right on the loop when the store answers at once."""
    store = CountingStore(clock)
    params = LeaseParams(ttl=3.0, renew_interval=1.0)
    leases = []
    for n in range(LEASES):
        lease, _ = await acquire_lease_async(
            LockOps(store), f"k{n}", params=params, schedule=None, time_provider=clock, signal=None
        )
        assert lease is not None
        leases.append(lease)
    threads = set(threading.enumerate())
    await astep(clock, 5.01)
    # No thread started (one left by an earlier test may end meanwhile: its idle exit).
    assert set(threading.enumerate()) <= threads
    assert sum(store.batches) == 5 * LEASES
    assert len(store.batches) == 5 * 3
    assert not any(lease.lost for lease in leases)
    for lease in leases:
        assert await lease.finish_async() is None


def test_a_store_that_overrides_renew_gets_its_own_renew_for_each(clock: FakeTimeProvider) -> None:
    """A memory store subclass with its own `renew` (a test double) is not bypassed by the batch."""
    store = FaultyStore(clock)
    params = LeaseParams(ttl=3.0, renew_interval=1.0)
    leases = [
        acquire_lease(LockOps(store), f"k{n}", params=params, schedule=None, time_provider=clock, signal=None)[0]
        for n in range(3)
    ]
    step(clock, 1.0)
    idle()
    assert store.count("renew") == 3
    for lease in leases:
        assert lease is not None
        lease.finish()


def test_a_failing_batch_fails_each_renewal_and_retries(clock: FakeTimeProvider) -> None:
    """A batch call that raises is each lease's failed renewal: reported, retried, not lost."""
    errors: list[Exception] = []
    store = FaultyStore(clock)
    store.renew_error = ConnectionError("blip")
    params = LeaseParams(ttl=3.0, renew_interval=1.0, on_renew_error=lambda _lease, exc: errors.append(exc))
    leases = [
        acquire_lease(LockOps(store), f"k{n}", params=params, schedule=None, time_provider=clock, signal=None)[0]
        for n in range(3)
    ]
    step(clock, 1.0)
    idle()
    assert len(errors) == 3
    store.renew_error = None
    step(clock, 0.1)
    idle()
    for lease in leases:
        assert lease is not None
        assert not lease.lost
        assert lease.finish() is None


class PipelinedStore(MemoryLockStore):
    """Renews a batch in one awaited call, as the Redis stores' pipeline does; answers can be forced or held."""

    def __init__(self, clock: FakeTimeProvider) -> None:
        super().__init__(clock)
        self.calls: list[int] = []
        self.forced: dict[str, bool | Exception] = {}
        self.gate: asyncio.Event | None = None
        self.cancelled = 0

    async def renew_many_async(self, items: Sequence[tuple[str, str, float]]) -> list[bool | Exception]:
        self.calls.append(len(items))
        if self.gate is not None:
            try:
                await self.gate.wait()
            except asyncio.CancelledError:
                self.cancelled += 1
                raise
        return [self.forced[key] if key in self.forced else self.renew(key, owner, ttl) for key, owner, ttl in items]


async def _pipelined_leases(store: PipelinedStore, clock: FakeTimeProvider, params: LeaseParams) -> list[Any]:
    assert isinstance(store, AsyncSupportsRenewMany)
    leases = []
    for n in range(3):
        lease, _ = await acquire_lease_async(
            LockOps(store), f"k{n}", params=params, schedule=None, time_provider=clock, signal=None
        )
        assert lease is not None
        leases.append(lease)
    return leases


async def test_async_batches_go_out_in_one_store_call_each_answer_its_own(clock: FakeTimeProvider) -> None:
    """`renew_many_async`: one call for the batch; a False loses only its lease, an error is only its lease's."""
    store = PipelinedStore(clock)
    errors: list[tuple[str, Exception]] = []
    params = LeaseParams(ttl=3.0, renew_interval=1.0, on_renew_error=lambda lease, exc: errors.append((lease.key, exc)))
    leases = await _pipelined_leases(store, clock, params)
    blip = ConnectionError("blip")
    store.forced = {"k1": False, "k2": blip}
    await astep(clock, 1.0)
    assert store.calls == [3]
    assert [lease.lost for lease in leases] == [False, True, False]
    assert errors == [("k2", blip)]
    store.forced = {}
    await astep(clock, 0.2)  # the failed renewal is retried within ttl/10
    assert store.calls == [3, 1]
    assert not leases[2].lost
    assert leases[2].expires_in() > 2.5
    for lease in (leases[0], leases[2]):
        assert await lease.finish_async() is None


async def test_a_hanging_async_batch_is_bounded_by_the_leases_deadlines(clock: FakeTimeProvider) -> None:
    """A batch call that never answers: each lease is lost at its deadline and the call is cancelled."""
    store = PipelinedStore(clock)
    store.gate = asyncio.Event()
    params = LeaseParams(ttl=1.0, renew_interval=0.3)
    leases = await _pipelined_leases(store, clock, params)
    await astep(clock, 0.9)
    assert store.calls == [3]
    assert not any(lease.lost for lease in leases)  # in flight, deadline not reached
    await astep(clock, 0.2)
    assert all(lease.lost for lease in leases)
    assert store.cancelled == 1
    for lease in leases:
        assert await lease.finish_async() is not None
