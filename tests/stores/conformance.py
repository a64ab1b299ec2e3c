"""The store conformance suite: every lock and semaphore store must pass it.

How a store plugs in: a test module imports the `Test*` classes and the `lock_store` /
`semaphore_store` fixtures from here, and defines a fixture `lock_store_factory` (and/or
`semaphore_store_factory`) returning a zero-argument callable that makes a fresh
`StoreHarness(store, advance)`:

    from conformance import TestLockStoreConformance, lock_store  # noqa: F401


    @pytest.fixture
    def lock_store_factory(redis_url):
        return lambda: StoreHarness(RedisLockStore(redis.Redis.from_url(redis_url)), advance=time.sleep)

- `advance(seconds)` moves the store's clock forward by at least `seconds`. A memory store on a
  `FakeTimeProvider` advances the fake clock; a Redis store's clock is the server's, so its
  harness sleeps for real (the expiry tests use ttls of a few tenths of a second: `EXPIRY_TTL`).
  Set `StoreHarness(..., real_time=True)` for such stores: waits that the suite would otherwise
  drive by advancing a clock then happen in real time.
- Each test runs once per flavour the store offers ("sync", "async"); the other is skipped.
- Keys are unique per test (`key` fixture), so a shared server needs no flush between tests.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pytest

from resilience.exceptions import ValidationError
from resilience.stores import (
    AsyncLockStore,
    AsyncSemaphoreStore,
    AsyncSupportsInspection,
    AsyncSupportsLeaseInfo,
    AsyncSupportsPermits,
    AsyncSupportsReleaseNotification,
    AsyncSupportsRenewMany,
    LockInfo,
    LockStore,
    SemaphoreStore,
    SupportsInspection,
    SupportsLeaseInfo,
    SupportsPermits,
    SupportsReleaseNotification,
    SupportsRenewMany,
    serves,
)

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = [
    "EXPIRY_TTL",
    "StoreHarness",
    "TestLockStoreConformance",
    "TestSemaphorePermitsConformance",
    "TestSemaphoreStoreConformance",
    "key",
    "lock_store",
    "semaphore_store",
]

EXPIRY_TTL = 0.2
"""The ttl of the tests that let a lease expire (short enough for a real clock)."""
LONG_TTL = 30.0
"""The ttl of the tests that must not see an expiry."""
WAIT_TIMEOUT = 0.6
"""The timeout of a wait that must still be pending a few loop turns later, then time out."""
MAX_TOKEN = 2**53
TURN_WAIT = 3.0
"""How long a queued waiter's turn check may wait (time to subscribe on a loaded machine)."""
STALL_ATTEMPTS = 3
"""How often a check that needs its steps to fit in `EXPIRY_TTL` of real time is tried on a fresh key."""


@dataclass
class StoreHarness:
    """A store under test and how to move its clock forward."""

    store: Any
    advance: Callable[[float], object]
    real_time: bool = False


def _stalled(started: float, until: float | None = None) -> bool:
    """Whether the steps since `started` took a whole `EXPIRY_TTL` of real time.

    On a real clock, a check that two steps happen within one ttl means nothing once the
    machine stalled that long between them (a loaded CI machine, a garbage collection): such a
    run proves neither outcome, so the test runs again on a fresh key (`STALL_ATTEMPTS`).
    """
    return (time.monotonic() if until is None else until) - started >= EXPIRY_TTL * 0.9


class Driver:
    """One flavour (sync or async) of a store, behind one async interface for the tests."""

    def __init__(self, harness: StoreHarness, flavour: str) -> None:
        self.harness = harness
        self.store = harness.store
        self.flavour = flavour
        self.is_async = flavour == "async"

    async def advance(self, seconds: float) -> None:
        if self.harness.real_time:
            await asyncio.to_thread(self.harness.advance, seconds)
        else:
            self.harness.advance(seconds)

    async def acquire(self, key: str, owner: str, ttl: float, *limit: int) -> int | None:
        if self.is_async:
            return await self.store.acquire_async(key, owner, ttl, *limit)  # type: ignore[no-any-return]
        return self.store.acquire(key, owner, ttl, *limit)  # type: ignore[no-any-return]

    async def renew(self, key: str, owner: str, ttl: float) -> bool:
        if self.is_async:
            return await self.store.renew_async(key, owner, ttl)  # type: ignore[no-any-return]
        return self.store.renew(key, owner, ttl)  # type: ignore[no-any-return]

    async def release(self, key: str, owner: str) -> bool:
        if self.is_async:
            return await self.store.release_async(key, owner)  # type: ignore[no-any-return]
        return self.store.release(key, owner)  # type: ignore[no-any-return]

    def has_lease_info(self) -> bool:
        return serves(self.store, AsyncSupportsLeaseInfo if self.is_async else SupportsLeaseInfo)

    async def acquire_or_ttl(self, key: str, owner: str, ttl: float, *limit: int) -> tuple[int | None, float | None]:
        if self.is_async:
            return await self.store.acquire_or_ttl_async(key, owner, ttl, *limit)  # type: ignore[no-any-return]
        return self.store.acquire_or_ttl(key, owner, ttl, *limit)  # type: ignore[no-any-return]

    def has_renew_many(self) -> bool:
        return serves(self.store, AsyncSupportsRenewMany if self.is_async else SupportsRenewMany)

    async def renew_many(self, items: list[tuple[str, str, float]]) -> list[bool | Exception]:
        if self.is_async:
            return await self.store.renew_many_async(items)  # type: ignore[no-any-return]
        return self.store.renew_many(items)  # type: ignore[no-any-return]

    async def inspect(self, key: str) -> LockInfo | None:
        """`info(key)`, skipping the test when the store cannot inspect."""
        if not serves(self.store, AsyncSupportsInspection if self.is_async else SupportsInspection):
            pytest.skip("the store offers no inspection")
        if self.is_async:
            return await self.store.info_async(key)  # type: ignore[no-any-return]
        return self.store.info(key)  # type: ignore[no-any-return]

    async def force_release(self, key: str) -> bool:
        if self.is_async:
            return await self.store.force_release_async(key)  # type: ignore[no-any-return]
        return self.store.force_release(key)  # type: ignore[no-any-return]

    def has_notification(self) -> bool:
        kind = AsyncSupportsReleaseNotification if self.is_async else SupportsReleaseNotification
        return isinstance(self.store, kind)

    async def queue(self, key: str, owner: str, ttl: float, *limit: int) -> tuple[int | None, float | None]:
        """`acquire_or_queue` (a waiter joins the key's queue when refused)."""
        if self.is_async:
            return await self.store.acquire_or_queue_async(key, owner, ttl, *limit)  # type: ignore[no-any-return]
        return self.store.acquire_or_queue(key, owner, ttl, *limit)  # type: ignore[no-any-return]

    async def turn(self, key: str, owner: str, limit: int, permits: int) -> bool:
        """A queued waiter's `wait_released`: True at once when its slots are free for it.

        (False only after the wait, and a release meanwhile may also answer True: only a True
        that the state requires is checked.)
        """
        if self.is_async:
            waiting = asyncio.ensure_future(self.store.wait_released_async(key, TURN_WAIT, owner, limit, permits))
        else:
            waiting = asyncio.ensure_future(
                asyncio.to_thread(self.store.wait_released, key, TURN_WAIT, owner, limit, permits)
            )
        while not self.harness.real_time and not waiting.done():  # a fake clock: move it past the wait
            await asyncio.sleep(0.005)
            self.harness.advance(TURN_WAIT)
        return await asyncio.wait_for(waiting, 10)

    def start_wait_released(self, key: str, timeout: float) -> asyncio.Future[bool]:
        """Start waiting for a release of `key` (a task, or a thread for the sync flavour)."""
        if self.is_async:
            return asyncio.ensure_future(self.store.wait_released_async(key, timeout))
        return asyncio.ensure_future(asyncio.to_thread(self.store.wait_released, key, timeout))


def _driver(harness: StoreHarness, flavour: str, sync_kind: type, async_kind: type) -> Driver:
    kind = async_kind if flavour == "async" else sync_kind
    if not isinstance(harness.store, kind):
        pytest.skip(f"the store offers no {flavour} flavour")
    return Driver(harness, flavour)


@pytest.fixture(params=["sync", "async"])
def lock_store(request: pytest.FixtureRequest, lock_store_factory: Callable[[], StoreHarness]) -> Driver:
    """The lock store under test, in one flavour."""
    return _driver(lock_store_factory(), request.param, LockStore, AsyncLockStore)


@pytest.fixture(params=["sync", "async"])
def semaphore_store(request: pytest.FixtureRequest, semaphore_store_factory: Callable[[], StoreHarness]) -> Driver:
    """The semaphore store under test, in one flavour."""
    return _driver(semaphore_store_factory(), request.param, SemaphoreStore, AsyncSemaphoreStore)


@pytest.fixture
def key() -> str:
    """A key no other test uses."""
    return f"conformance:{uuid.uuid4().hex}"


async def _settled(future: asyncio.Future[bool], limit: float = 5.0) -> bool:
    return await asyncio.wait_for(future, limit)


async def _still_pending(future: asyncio.Future[bool]) -> bool:
    for _ in range(5):
        await asyncio.sleep(0.01)
    return not future.done()


class TestLockStoreConformance:
    """What every `LockStore` / `AsyncLockStore` guarantees (DESIGN §2.8)."""

    async def test_acquire_a_free_key_returns_a_token(self, lock_store: Driver, key: str) -> None:
        """A free key is granted with an integer token in [1, 2**53)."""
        token = await lock_store.acquire(key, "a", LONG_TTL)
        assert isinstance(token, int)
        assert 1 <= token < MAX_TOKEN

    async def test_a_held_key_is_refused_to_another_owner(self, lock_store: Driver, key: str) -> None:
        """Exclusivity: while the lease lives, another owner gets None."""
        assert await lock_store.acquire(key, "a", LONG_TTL) is not None
        assert await lock_store.acquire(key, "b", LONG_TTL) is None

    async def test_acquire_by_the_holder_returns_the_same_token(self, lock_store: Driver, key: str) -> None:
        """Same-owner acquire is idempotent (a lost reply is harmless)."""
        token = await lock_store.acquire(key, "a", LONG_TTL)
        assert await lock_store.acquire(key, "a", LONG_TTL) == token

    async def test_keys_are_independent(self, lock_store: Driver, key: str) -> None:
        """Holding one key does not hold another."""
        assert await lock_store.acquire(key, "a", LONG_TTL) is not None
        assert await lock_store.acquire(key + ":other", "b", LONG_TTL) is not None

    async def test_renew_checks_the_owner(self, lock_store: Driver, key: str) -> None:
        """Only the holder renews; another owner, or a free key, gets False."""
        await lock_store.acquire(key, "a", LONG_TTL)
        assert await lock_store.renew(key, "a", LONG_TTL) is True
        assert await lock_store.renew(key, "b", LONG_TTL) is False
        assert await lock_store.renew(key + ":free", "a", LONG_TTL) is False

    async def test_renew_many_answers_as_renew_does(self, lock_store: Driver, key: str) -> None:
        """`renew_many` (optional): one answer per item, in order, each the one `renew` gives."""
        if not lock_store.has_renew_many():
            pytest.skip("the store does not renew many at once")
        await lock_store.acquire(key + ":0", "a", LONG_TTL)
        await lock_store.acquire(key + ":1", "b", LONG_TTL)
        await lock_store.acquire(key + ":3", "a", LONG_TTL)
        items = [(f"{key}:{n}", "a", LONG_TTL) for n in range(4)]
        expected = [True, False, False, True]  # ours, another owner's, free, ours
        assert await lock_store.renew_many(items) == expected
        assert [await lock_store.renew(*item) for item in items] == expected
        assert await lock_store.renew_many([]) == []

    async def test_release_checks_the_owner(self, lock_store: Driver, key: str) -> None:
        """Another owner's release is refused and changes nothing; the holder's frees the key."""
        await lock_store.acquire(key, "a", LONG_TTL)
        assert await lock_store.release(key, "b") is False
        assert await lock_store.acquire(key, "b", LONG_TTL) is None
        assert await lock_store.release(key, "a") is True
        assert await lock_store.acquire(key, "b", LONG_TTL) is not None

    async def test_release_twice_is_false_the_second_time(self, lock_store: Driver, key: str) -> None:
        """A release answers True only while the owner still held the key."""
        await lock_store.acquire(key, "a", LONG_TTL)
        assert await lock_store.release(key, "a") is True
        assert await lock_store.release(key, "a") is False
        assert await lock_store.release(key + ":never", "a") is False

    async def test_tokens_increase_across_release(self, lock_store: Driver, key: str) -> None:
        """Every new acquisition of a key gets a larger token than the last one."""
        tokens = []
        for owner in ("a", "b", "a", "c"):
            token = await lock_store.acquire(key, owner, LONG_TTL)
            assert token is not None
            tokens.append(token)
            assert await lock_store.release(key, owner)
        assert tokens == sorted(set(tokens))

    async def test_a_lease_expires_on_the_stores_clock(self, lock_store: Driver, key: str) -> None:
        """After ttl on the store's clock, another owner can take the key."""
        for attempt in range(STALL_ATTEMPTS):
            fresh = f"{key}:{attempt}"
            started = time.monotonic()
            assert await lock_store.acquire(fresh, "a", EXPIRY_TTL) is not None
            taken = await lock_store.acquire(fresh, "b", EXPIRY_TTL)
            if not _stalled(started):
                break
        assert taken is None
        await lock_store.advance(EXPIRY_TTL * 1.5)
        assert await lock_store.acquire(fresh, "b", EXPIRY_TTL) is not None

    async def test_tokens_increase_across_expiry(self, lock_store: Driver, key: str) -> None:
        """A key taken over after expiry gets a larger token."""
        first = await lock_store.acquire(key, "a", EXPIRY_TTL)
        await lock_store.advance(EXPIRY_TTL * 1.5)
        second = await lock_store.acquire(key, "b", EXPIRY_TTL)
        assert first is not None
        assert second is not None
        assert second > first

    async def test_renew_pushes_the_expiry_out(self, lock_store: Driver, key: str) -> None:
        """A renewal sets the expiry to now + ttl: the lease outlives its first ttl."""
        for attempt in range(STALL_ATTEMPTS):
            fresh = f"{key}:{attempt}"
            started = time.monotonic()
            await lock_store.acquire(fresh, "a", EXPIRY_TTL)
            await lock_store.advance(EXPIRY_TTL * 0.6)
            renewing = time.monotonic()
            renewed = await lock_store.renew(fresh, "a", EXPIRY_TTL)
            answered = time.monotonic()
            await lock_store.advance(EXPIRY_TTL * 0.6)
            taken = await lock_store.acquire(fresh, "b", EXPIRY_TTL)
            # The renewal ran before the first expiry, and the acquire before the renewed one.
            if not _stalled(started, answered) and not _stalled(renewing):
                break
        assert renewed is True
        assert taken is None

    async def test_renew_after_expiry_fails_and_never_reacquires(self, lock_store: Driver, key: str) -> None:
        """An expired lease is gone: renew answers False and the key stays free."""
        await lock_store.acquire(key, "a", EXPIRY_TTL)
        await lock_store.advance(EXPIRY_TTL * 1.5)
        assert await lock_store.renew(key, "a", LONG_TTL) is False
        assert await lock_store.acquire(key, "b", LONG_TTL) is not None
        assert await lock_store.renew(key, "a", LONG_TTL) is False

    async def test_release_after_expiry_is_false(self, lock_store: Driver, key: str) -> None:
        """A release after expiry answers False and never frees another owner's lease."""
        await lock_store.acquire(key, "a", EXPIRY_TTL)
        await lock_store.advance(EXPIRY_TTL * 1.5)
        await lock_store.acquire(key, "b", LONG_TTL)
        assert await lock_store.release(key, "a") is False
        assert await lock_store.acquire(key, "c", LONG_TTL) is None

    async def test_lease_info_reports_the_holders_time_left(self, lock_store: Driver, key: str) -> None:
        """`acquire_or_ttl`: (token, None) when granted; (None, 0 < left <= ttl) when held."""
        if not lock_store.has_lease_info():
            pytest.skip("the store offers no lease info")
        token, left = await lock_store.acquire_or_ttl(key, "a", LONG_TTL)
        assert token is not None
        assert left is None
        token, left = await lock_store.acquire_or_ttl(key, "b", LONG_TTL)
        assert token is None
        assert left is not None
        assert 0 < left <= LONG_TTL
        again, _ = await lock_store.acquire_or_ttl(key, "a", LONG_TTL)
        assert again == (await lock_store.acquire(key, "a", LONG_TTL))

    async def test_wait_released_returns_at_once_for_a_free_key(self, lock_store: Driver, key: str) -> None:
        """Waiting on a free key answers True without waiting."""
        if not lock_store.has_notification():
            pytest.skip("the store offers no release notification")
        assert await _settled(lock_store.start_wait_released(key, LONG_TTL)) is True

    async def test_wait_released_is_woken_by_a_release(self, lock_store: Driver, key: str) -> None:
        """A waiter is woken (True) by the holder's release, long before its timeout."""
        if not lock_store.has_notification():
            pytest.skip("the store offers no release notification")
        await lock_store.acquire(key, "a", LONG_TTL)
        waiting = lock_store.start_wait_released(key, LONG_TTL)
        assert await _still_pending(waiting)
        assert await lock_store.release(key, "a")
        assert await _settled(waiting) is True

    async def test_wait_released_times_out(self, lock_store: Driver, key: str) -> None:
        """A waiter whose key stays held answers False after its timeout."""
        if not lock_store.has_notification():
            pytest.skip("the store offers no release notification")
        await lock_store.acquire(key, "a", LONG_TTL)
        # Not EXPIRY_TTL: a loaded machine (the coverage run beside another worker) once took
        # 0.2 s to look at a pending wait 5 times, and the wait had timed out by then.
        waiting = lock_store.start_wait_released(key, WAIT_TIMEOUT)
        assert await _still_pending(waiting)
        await lock_store.advance(WAIT_TIMEOUT * 1.5)
        assert await _settled(waiting) is False

    async def test_info_and_force_release(self, lock_store: Driver, key: str) -> None:
        """`SupportsInspection`: None when free; the holder (owner, token, time left, 1 permit); break-glass."""
        assert await lock_store.inspect(key) is None
        token = await lock_store.acquire(key, "a", LONG_TTL)
        found = await lock_store.inspect(key)
        assert found is not None
        assert (found.key, found.mode, len(found.holders)) == (key, "exclusive", 1)
        holder = found.holders[0]
        assert (holder.owner, holder.token, holder.permits) == ("a", token, 1)
        assert holder.expires_in is not None
        assert 0 < holder.expires_in <= LONG_TTL
        assert found.waiters is None or found.waiters == 0
        assert await lock_store.force_release(key) is True
        assert await lock_store.inspect(key) is None
        assert await lock_store.renew(key, "a", LONG_TTL) is False  # the holder learns of the loss
        assert await lock_store.force_release(key) is False
        later = await lock_store.acquire(key, "b", LONG_TTL)
        assert token is not None
        assert later is not None
        assert later > token


class TestSemaphoreStoreConformance:
    """What every `SemaphoreStore` / `AsyncSemaphoreStore` guarantees (DESIGN §2.8)."""

    async def test_up_to_limit_holders_each_with_its_own_token(self, semaphore_store: Driver, key: str) -> None:
        """`limit` owners get distinct tokens; the next one is refused."""
        tokens = [await semaphore_store.acquire(key, owner, LONG_TTL, 3) for owner in "abc"]
        assert None not in tokens
        assert len(set(tokens)) == 3
        assert await semaphore_store.acquire(key, "d", LONG_TTL, 3) is None

    async def test_acquire_by_a_holder_returns_its_token(self, semaphore_store: Driver, key: str) -> None:
        """Same-owner acquire is idempotent and takes no second slot."""
        token = await semaphore_store.acquire(key, "a", LONG_TTL, 2)
        assert await semaphore_store.acquire(key, "a", LONG_TTL, 2) == token
        assert await semaphore_store.acquire(key, "b", LONG_TTL, 2) is not None

    async def test_release_frees_one_slot_for_its_owner_only(self, semaphore_store: Driver, key: str) -> None:
        """A release frees the owner's slot; a stranger's release answers False."""
        await semaphore_store.acquire(key, "a", LONG_TTL, 1)
        assert await semaphore_store.release(key, "z") is False
        assert await semaphore_store.release(key, "a") is True
        assert await semaphore_store.release(key, "a") is False
        assert await semaphore_store.acquire(key, "b", LONG_TTL, 1) is not None

    async def test_renew_checks_the_owner(self, semaphore_store: Driver, key: str) -> None:
        """Only a holder renews its slot."""
        await semaphore_store.acquire(key, "a", LONG_TTL, 2)
        assert await semaphore_store.renew(key, "a", LONG_TTL) is True
        assert await semaphore_store.renew(key, "b", LONG_TTL) is False

    async def test_an_expired_slot_is_free_and_cannot_be_renewed(self, semaphore_store: Driver, key: str) -> None:
        """After ttl the slot is free for others, and renew never re-acquires it."""
        first = await semaphore_store.acquire(key, "a", EXPIRY_TTL, 1)
        await semaphore_store.advance(EXPIRY_TTL * 1.5)
        assert await semaphore_store.renew(key, "a", LONG_TTL) is False
        second = await semaphore_store.acquire(key, "b", LONG_TTL, 1)
        assert first is not None
        assert second is not None
        assert second > first

    async def test_the_limit_is_enforced_at_each_call(self, semaphore_store: Driver, key: str) -> None:
        """Each call's limit decides: a larger limit admits more holders."""
        await semaphore_store.acquire(key, "a", LONG_TTL, 1)
        assert await semaphore_store.acquire(key, "b", LONG_TTL, 1) is None
        assert await semaphore_store.acquire(key, "b", LONG_TTL, 2) is not None

    async def test_info_and_force_release(self, semaphore_store: Driver, key: str) -> None:
        """`SupportsInspection`: every live holder by token, mode "semaphore"; break-glass frees every slot."""
        assert await semaphore_store.inspect(key) is None
        tokens = [await semaphore_store.acquire(key, owner, LONG_TTL, 3) for owner in "ab"]
        found = await semaphore_store.inspect(key)
        assert found is not None
        assert (found.key, found.mode) == (key, "semaphore")
        assert [(holder.owner, holder.token, holder.permits) for holder in found.holders] == [
            ("a", tokens[0], 1),
            ("b", tokens[1], 1),
        ]
        assert await semaphore_store.force_release(key) is True
        assert await semaphore_store.inspect(key) is None
        assert await semaphore_store.renew(key, "a", LONG_TTL) is False
        assert await semaphore_store.renew(key, "b", LONG_TTL) is False
        assert await semaphore_store.force_release(key) is False


class TestSemaphorePermitsConformance:
    """What every store with `SupportsPermits` guarantees (DESIGN §2.21): several slots per holder."""

    @pytest.fixture(autouse=True)
    def _takes_permits(self, semaphore_store: Driver) -> None:
        kind = AsyncSupportsPermits if semaphore_store.is_async else SupportsPermits
        if not isinstance(semaphore_store.store, kind):
            pytest.skip("the store takes one slot per holder")

    async def test_permits_are_taken_all_or_none(self, semaphore_store: Driver, key: str) -> None:
        """A request for more slots than are free takes none of them; its permits count until released."""
        store = semaphore_store
        assert await store.acquire(key, "a", LONG_TTL, 4, 3) is not None
        assert await store.acquire(key, "b", LONG_TTL, 4, 2) is None
        assert await store.acquire(key, "c", LONG_TTL, 4, 1) is not None  # b took nothing
        assert await store.acquire(key, "d", LONG_TTL, 4, 1) is None
        assert await store.release(key, "a") is True
        assert await store.acquire(key, "b", LONG_TTL, 4, 2) is not None
        assert await store.acquire(key, "e", LONG_TTL, 4, 2) is None  # 1 + 2 of 4 held
        assert await store.acquire(key, "e", LONG_TTL, 4, 1) is not None

    async def test_a_holder_keeps_its_permits_across_renew_and_reacquire(
        self, semaphore_store: Driver, key: str
    ) -> None:
        """Renewing, or acquiring again, changes neither the token nor the slots held."""
        store = semaphore_store
        token = await store.acquire(key, "a", LONG_TTL, 3, 2)
        assert token is not None
        assert await store.renew(key, "a", LONG_TTL) is True
        assert await store.acquire(key, "a", LONG_TTL, 3, 2) == token
        assert await store.acquire(key, "b", LONG_TTL, 3, 2) is None
        assert await store.acquire(key, "b", LONG_TTL, 3, 1) is not None
        assert await store.release(key, "a") is True
        assert await store.acquire(key, "c", LONG_TTL, 3, 2) is not None

    async def test_an_expired_holder_gives_back_all_its_permits(self, semaphore_store: Driver, key: str) -> None:
        """A lapsed holder of every slot frees them all at once."""
        for _ in range(STALL_ATTEMPTS):
            attempt = f"{key}:{_}"
            started = time.monotonic()  # before the grant: its expiry runs from the store's receipt of it
            assert await semaphore_store.acquire(attempt, "a", EXPIRY_TTL, 3, 3) is not None
            refused = await semaphore_store.acquire(attempt, "b", LONG_TTL, 3, 1) is None
            if semaphore_store.harness.real_time and _stalled(started):
                continue
            assert refused
            break
        await semaphore_store.advance(EXPIRY_TTL * 1.5)
        assert await semaphore_store.acquire(attempt, "b", LONG_TTL, 3, 3) is not None

    async def test_a_big_request_at_the_head_is_not_overtaken(self, semaphore_store: Driver, key: str) -> None:
        """Queued first, a request for every slot goes before later small ones, queued or not."""
        store = semaphore_store
        assert await store.acquire(key, "holder", LONG_TTL, 3, 2) is not None
        assert (await store.queue(key, "big", LONG_TTL, 3, 3))[0] is None
        assert await store.queue(key, "small", LONG_TTL, 3, 1) == (None, None)  # one is free, but promised
        assert await store.acquire(key, "outsider", LONG_TTL, 3, 1) is None
        assert await store.release(key, "holder") is True
        assert (await store.queue(key, "small", LONG_TTL, 3, 1))[0] is None
        assert await store.turn(key, "big", 3, 3) is True  # its slots are free for it: at once
        assert (await store.queue(key, "big", LONG_TTL, 3, 3))[0] is not None
        assert (await store.queue(key, "small", LONG_TTL, 3, 1))[0] is None
        assert await store.release(key, "big") is True
        assert await store.turn(key, "small", 3, 1) is True
        assert (await store.queue(key, "small", LONG_TTL, 3, 1))[0] is not None

    async def test_small_requests_that_fit_are_served_together(self, semaphore_store: Driver, key: str) -> None:
        """Freed slots serve every waiter at the head that fits, in order, up to one that does not."""
        store = semaphore_store
        assert await store.acquire(key, "holder", LONG_TTL, 4, 4) is not None
        asks = (("one", 1), ("two", 2), ("three", 3), ("four", 1))
        for owner, permits in asks:
            assert (await store.queue(key, owner, LONG_TTL, 4, permits))[0] is None
        assert await store.release(key, "holder") is True
        assert await store.turn(key, "two", 4, 2) is True
        granted = [(await store.queue(key, owner, LONG_TTL, 4, permits))[0] is not None for owner, permits in asks]
        assert granted == [True, True, False, False]  # "three" does not fit in the slot left and holds "four" back

    async def test_a_waiter_that_gives_up_lets_the_next_one_through(self, semaphore_store: Driver, key: str) -> None:
        """A big waiter that leaves (`release` of a non-holder) no longer holds back the ones behind it."""
        store = semaphore_store
        assert await store.acquire(key, "holder", LONG_TTL, 2, 1) is not None
        assert (await store.queue(key, "big", LONG_TTL, 2, 2))[0] is None
        assert (await store.queue(key, "small", LONG_TTL, 2, 1))[0] is None
        assert await store.release(key, "big") is False
        assert (await store.queue(key, "small", LONG_TTL, 2, 1))[0] is not None

    async def test_bad_permits_are_refused_before_anything_is_taken(self, semaphore_store: Driver, key: str) -> None:
        """0, more than the limit, a bool or a float: `ValidationError` naming `permits`; nothing held."""
        for bad in (0, 4, True, 1.5, -1):
            with pytest.raises(ValidationError, match="permits"):
                await semaphore_store.acquire(key, "a", LONG_TTL, 3, bad)  # type: ignore[arg-type]
        assert await semaphore_store.acquire(key, "b", LONG_TTL, 3, 3) is not None

    async def test_holders_report_their_permits(self, semaphore_store: Driver, key: str) -> None:
        """`holders(key)`: each live holder's owner, token, time left and permits (what inspection shows)."""
        store = semaphore_store
        a = await store.acquire(key, "a", LONG_TTL, 5, 3)
        b = await store.acquire(key, "b", LONG_TTL, 5, 1)
        if store.is_async:
            holders = await store.store.holders_async(key)
        else:
            holders = await asyncio.to_thread(store.store.holders, key)
        assert sorted((owner, token, permits) for owner, token, _, permits in holders) == [
            ("a", a, 3),
            ("b", b, 1),
        ]
        assert all(0 < left <= LONG_TTL for _, _, left, _ in holders)
