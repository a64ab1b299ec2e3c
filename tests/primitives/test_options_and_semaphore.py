"""Option validation before any lock is taken, and `semaphore()` on a memory store."""

from __future__ import annotations

import asyncio
import datetime as dt
from typing import TYPE_CHECKING, Any

import pytest

from resilience import LockNotAcquiredError, SemaphoreLeaseLostError, ValidationError, get_lock_token
from resilience.primitives import Locks, Semaphores, lock, semaphore
from resilience.stores import MemoryLockStore, MemorySemaphoreStore
from resilience.testing import capture_events
from tests.unit.lockkit import FaultyStore, step

if TYPE_CHECKING:
    from resilience.primitives import LockHandle
    from resilience.testing import FakeTimeProvider

BAD_DURATIONS = [True, -1, float("nan"), float("inf"), "1", None]


class TestOptions:
    @pytest.mark.parametrize(
        ("option", "value"),
        [
            ("key", ""),
            ("key", 42),
            ("ttl", 0),
            ("ttl", 0.0001),
            ("ttl", True),
            ("ttl", float("nan")),
            ("ttl", float("inf")),
            ("ttl", -1),
            ("retries", -1),
            ("retries", 1.5),
            ("retries", True),
            ("retry_delay", -0.1),
            ("retry_delay", float("nan")),
            ("retry_delay", float("inf")),
            ("retry_delay", "0.1"),
            ("on_renew_error", "log"),
        ],
    )
    def test_run_options_are_validated_first(self, clock: FakeTimeProvider, option: str, value: object) -> None:
        """A bad option raises ValidationError naming it; the store is never called."""
        store = FaultyStore(clock)
        locks = lock(store)
        kwargs: dict[str, Any] = {} if option == "key" else {option: value}
        key = value if option == "key" else "k"
        with pytest.raises(ValidationError, match=f"^{option}: "):
            locks.run(key, lambda h: None, **kwargs)  # type: ignore[arg-type]
        with pytest.raises(ValidationError, match=f"^{option}: "):
            locks.hold(key, **kwargs)  # type: ignore[arg-type]
        if option != "on_renew_error":
            with pytest.raises(ValidationError, match=f"^{option}: "):
                locks.acquire(key, **kwargs)  # type: ignore[arg-type]
        assert store.calls == []

    def test_durations_may_be_timedeltas(self, clock: FakeTimeProvider) -> None:
        """ttl, retry_delay and heartbeat take a timedelta too."""
        locks = lock(MemoryLockStore(clock), ttl=dt.timedelta(seconds=8))
        assert locks.ttl == 8.0
        assert locks.run("k", lambda h: 1, heartbeat=dt.timedelta(seconds=1), retry_delay=dt.timedelta(0)) == 1

    @pytest.mark.parametrize("ttl", BAD_DURATIONS)
    def test_factory_ttl(self, clock: FakeTimeProvider, ttl: object) -> None:
        """lock(ttl=...) is validated at once."""
        with pytest.raises(ValidationError, match=r"^ttl: "):
            lock(MemoryLockStore(clock), ttl=ttl)  # type: ignore[arg-type]

    @pytest.mark.parametrize("prefix", ["", 3, None])
    def test_prefix(self, clock: FakeTimeProvider, prefix: object) -> None:
        """The prefix is a non-empty str."""
        with pytest.raises(ValidationError, match=r"^prefix: "):
            lock(MemoryLockStore(clock), prefix=prefix)  # type: ignore[arg-type]

    @pytest.mark.parametrize("client", [42, "redis://localhost", object()])
    def test_what_is_not_a_client_or_a_store(self, client: object) -> None:
        """Anything else is refused, naming what to pass."""
        with pytest.raises(ValidationError, match=r"^client: must be a redis client"):
            lock(client)

    def test_time_provider_must_be_a_clock(self, clock: FakeTimeProvider) -> None:
        """A time_provider without monotonic() is refused."""
        with pytest.raises(ValidationError, match=r"^time_provider: "):
            lock(MemoryLockStore(clock), time_provider=object())  # type: ignore[arg-type]

    @pytest.mark.parametrize("limit", [0, -1, True, 1.5, "2"])
    def test_semaphore_limit(self, clock: FakeTimeProvider, limit: object) -> None:
        """limit is an int >= 1."""
        with pytest.raises(ValidationError, match=r"^limit: "):
            semaphore(MemorySemaphoreStore(clock), limit=limit)  # type: ignore[arg-type]

    def test_a_lock_store_is_not_a_semaphore_store(self, clock: FakeTimeProvider) -> None:
        """semaphore() needs a semaphore store."""
        with pytest.raises(ValidationError, match="lock store"):
            semaphore(MemoryLockStore(clock), limit=2)

    def test_reprs(self, clock: FakeTimeProvider) -> None:
        """The primitives and their holds say what they are."""
        locks = lock(MemoryLockStore(clock))
        assert isinstance(locks, Locks)
        assert "ttl=30" in repr(locks)
        assert "held=False" in repr(locks.hold("k"))
        with locks:
            pass


class TestSemaphore:
    def test_limit_holders_at_once(self, clock: FakeTimeProvider) -> None:
        """limit=2: two handles, each with its own token; the third is refused."""
        sems = semaphore(MemorySemaphoreStore(clock), limit=2)
        assert isinstance(sems, Semaphores)
        first, second = sems.acquire("pool"), sems.acquire("pool")
        assert first is not None
        assert second is not None
        assert first.token != second.token
        assert sems.acquire("pool") is None
        with pytest.raises(LockNotAcquiredError, match="no free slot") as caught:
            sems.run("pool", lambda h: None)
        assert caught.value.key == "pool"
        assert first.release() is True
        assert sems.run("pool", lambda h: get_lock_token() == h.token) is True

    def test_a_lost_slot_raises_semaphore_lease_lost(self, clock: FakeTimeProvider) -> None:
        """heartbeat=False and a body outliving the ttl: SemaphoreLeaseLostError."""
        sems = semaphore(MemorySemaphoreStore(clock), limit=3, ttl=2)

        def body(handle: LockHandle) -> None:
            step(clock, 2.1)
            assert isinstance(handle.signal.reason, SemaphoreLeaseLostError)

        with capture_events() as events, pytest.raises(SemaphoreLeaseLostError):
            sems.run("pool", body, heartbeat=False)
        assert {e.strategy_name for e in events} == {"Semaphore"}

    def test_a_renewed_slot_survives(self, clock: FakeTimeProvider) -> None:
        """The default heartbeat renews the slot."""
        sems = semaphore(MemorySemaphoreStore(clock), limit=1, ttl=2)
        assert sems.run("pool", lambda h: step(clock, 5) or h.signal.aborted) is False

    def test_the_prefix_names_the_semaphore_key(self, clock: FakeTimeProvider) -> None:
        """With a store the semaphore's keys are semaphore:<key>."""
        store = MemorySemaphoreStore(clock)
        with semaphore(store, limit=1).hold("pool"):
            assert store.acquire("semaphore:pool", "other", 1, 1) is None

    async def test_async_semaphore(self, clock: FakeTimeProvider) -> None:
        """The async twins on a semaphore."""
        sems = semaphore(MemorySemaphoreStore(clock), limit=1)

        async def body(handle: LockHandle) -> int:
            assert await sems.acquire_async("pool") is None
            return handle.token

        assert await sems.run_async("pool", body) == 1


class TestClientForms:
    async def test_classes_and_partials_are_factories_told_apart_by_class(self) -> None:
        """redis.Redis (or a partial of it) is a sync factory; redis.asyncio.Redis an async one; none is called yet."""
        import functools

        import redis
        import redis.asyncio

        sync = lock(functools.partial(redis.Redis, port=1))
        with pytest.raises(ValidationError, match=r"redis\.asyncio\.Redis"):
            await sync.acquire_async("k")
        asynchronous = lock(functools.partial(redis.asyncio.Redis, port=1))
        with pytest.raises(ValidationError, match=r"redis\.Redis"):
            asynchronous.acquire("k")
        with pytest.raises(ValidationError, match=r"redis\.asyncio\.Redis"):
            await lock(redis.Redis).run_async("k", lambda h: asyncio.sleep(0))
        await asynchronous.aclose()
        sync.close()
