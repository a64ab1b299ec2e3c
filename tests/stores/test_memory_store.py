"""What the memory stores add to the conformance suite: one counter, bounded memory, threads."""

from __future__ import annotations

import gc
import threading

from resilience._time import SYSTEM_TIME
from resilience.stores import MemoryLockStore, MemorySemaphoreStore
from resilience.stores._memory import _round_ttl, default_lock_store
from resilience.testing import FakeTimeProvider


def test_tokens_come_from_one_counter_across_keys() -> None:
    """Tokens differ across keys and only increase, store-wide."""
    store = MemoryLockStore(FakeTimeProvider())
    tokens = [store.acquire(f"k{i}", "o", 1.0) for i in range(5)]
    assert tokens == [1, 2, 3, 4, 5]


def test_ttl_is_rounded_up_to_whole_milliseconds() -> None:
    """A ttl of 1.0001 ms lives 2 ms; 3 ms stays 3 ms (no float noise)."""
    assert _round_ttl(0.0010001) == 0.002
    assert _round_ttl(0.003) == 0.003
    assert _round_ttl(0.0) == 0.001
    clock = FakeTimeProvider()
    store = MemoryLockStore(clock)
    store.acquire("k", "a", 0.0011)
    clock.advance(0.0019)
    assert store.acquire("k", "b", 1.0) is None
    clock.advance(0.0001)
    assert store.acquire("k", "b", 1.0) is not None


def test_many_keys_locked_and_released_leave_nothing_behind() -> None:
    """Bounded memory: no per-key state survives a released lease.

    100,000 keys: any per-key leftover shows as well as with a million, which under coverage on
    a loaded 2-core machine came near the per-test timeout.
    """
    store = MemoryLockStore(FakeTimeProvider())
    acquire, release = store.acquire, store.release
    for i in range(100_000):
        key = f"k{i}"
        acquire(key, "o", 30.0)
        release(key, "o")
    assert len(store) == 0
    assert store._listeners == {}


def test_expired_leases_are_swept_as_the_table_grows() -> None:
    """Leases that expire unreleased do not accumulate: the table is swept as it doubles."""
    clock = FakeTimeProvider()
    store = MemoryLockStore(clock)
    for round_ in range(20):
        for i in range(1000):
            store.acquire(f"r{round_}:{i}", "o", 0.5)
        clock.advance(1.0)
    assert len(store) <= 2048 + 1000


def test_semaphore_state_ends_with_its_holders() -> None:
    """A semaphore key whose holders released or expired keeps no state."""
    clock = FakeTimeProvider()
    store = MemorySemaphoreStore(clock)
    for i in range(10_000):
        store.acquire(f"k{i}", "a", 30.0, 2)
        store.acquire(f"k{i}", "b", 30.0, 2)
        store.release(f"k{i}", "a")
        store.release(f"k{i}", "b")
    assert len(store) == 0
    for round_ in range(20):
        for i in range(1000):
            store.acquire(f"r{round_}:{i}", "a", 0.5, 2)
        clock.advance(1.0)
    assert len(store) <= 2048 + 1000


def test_semaphore_lease_info_reports_the_first_expiry() -> None:
    """A full semaphore reports the time until its first slot frees."""
    clock = FakeTimeProvider()
    store = MemorySemaphoreStore(clock)
    store.acquire_or_ttl("k", "a", 5.0, 2)
    clock.advance(1.0)
    store.acquire_or_ttl("k", "b", 5.0, 2)
    assert store.acquire_or_ttl("k", "c", 5.0, 2) == (None, 4.0)


def test_waiters_are_forgotten_when_their_wait_ends() -> None:
    """A timed-out waiter leaves no listener behind."""
    clock = FakeTimeProvider()
    store = MemoryLockStore(clock)
    store.acquire("k", "a", 30.0)
    done = threading.Event()
    result: list[bool] = []

    def wait() -> None:
        result.append(store.wait_released("k", 1.0))
        done.set()

    thread = threading.Thread(target=wait)
    thread.start()
    while not store._listeners:
        threading.Event().wait(0.001)
    clock.advance(1.0)
    thread.join(5)
    assert result == [False]
    assert store._listeners == {}


def test_wait_released_in_real_time_on_the_system_clock() -> None:
    """On the system clock a wait times out in real time, and a release wakes it."""
    store = MemoryLockStore()
    store.acquire("k", "a", 30.0)
    assert store.wait_released("k", 0.01) is False
    threading.Timer(0.01, lambda: store.release("k", "a")).start()
    assert store.wait_released("k", 5.0) is True


def test_many_threads_never_share_a_lease() -> None:
    """Under real threads, every acquisition excludes the others until released."""
    store = MemoryLockStore()
    inside = 0
    overlaps = 0
    guard = threading.Lock()

    def worker(n: int) -> None:
        nonlocal inside, overlaps
        owner = f"w{n}"
        for _ in range(300):
            if store.acquire("k", owner, 30.0) is None:
                continue
            with guard:
                inside += 1
                overlaps += inside > 1
            with guard:
                inside -= 1
            store.release("k", owner)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert overlaps == 0


def test_default_store_is_one_per_clock_and_dies_with_it() -> None:
    """One default store per time provider; the system clock's is a singleton; fake ones are weak."""
    assert default_lock_store(SYSTEM_TIME) is default_lock_store(SYSTEM_TIME)
    clock = FakeTimeProvider()
    store = default_lock_store(clock)
    assert default_lock_store(clock) is store
    assert store.time_provider is clock
    assert default_lock_store(FakeTimeProvider()) is not store
    import resilience.stores._memory as memory

    before = len(memory._BY_CLOCK)
    del clock, store
    gc.collect()
    assert len(memory._BY_CLOCK) == before - 1


def test_a_clock_that_cannot_be_weakly_referenced_still_gets_one_store() -> None:
    """A custom clock without weak references keeps one store for the process."""

    class Clock:
        __slots__ = ("_inner",)

        def __init__(self) -> None:
            self._inner = FakeTimeProvider()

        def monotonic(self) -> float:
            return self._inner.monotonic()

    clock = Clock()
    assert default_lock_store(clock) is default_lock_store(clock)  # type: ignore[arg-type]


def test_repr_names_the_clock() -> None:
    """The stores' repr shows their clock."""
    assert "FakeTimeProvider" in repr(MemoryLockStore(FakeTimeProvider()))
    assert "FakeTimeProvider" in repr(MemorySemaphoreStore(FakeTimeProvider()))


def test_force_release_frees_a_held_key_whoever_holds_it() -> None:
    """True when held, False when free; the holder's next renewal answers False; tokens still rise."""
    clock = FakeTimeProvider()
    store = MemoryLockStore(clock)
    assert store.force_release("k") is False
    first = store.acquire("k", "holder", 30.0)
    assert first is not None
    woken = threading.Event()
    store.add_release_listener("k", woken.set)
    assert store.force_release("k") is True
    assert woken.is_set()
    assert store.renew("k", "holder", 30.0) is False
    second = store.acquire("k", "next", 30.0)
    assert second is not None
    assert second > first
    assert store.force_release("k") is True
    assert store.force_release("k") is False


def test_force_release_loses_a_pipeline_lease_on_a_fake_clock() -> None:
    """docs/testing.md: advancing the clock alone renews; force_release then one renewal interval loses."""
    from resilience import LockLostError, ResiliencePipelineBuilder, get_context

    clock = FakeTimeProvider()
    store = MemoryLockStore(clock)
    pipeline = ResiliencePipelineBuilder(time_provider=clock).add_lock("k", ttl=3.0, store=store).build()

    def body() -> tuple[bool, bool, BaseException | None]:
        context = get_context()
        assert context is not None
        clock.advance(30)
        kept = not context.signal.aborted
        assert store.force_release("k")
        told_at_once = context.signal.aborted
        clock.advance(1.0)
        return kept, told_at_once, context.signal.reason

    kept, told_at_once, reason = pipeline.execute(body)
    assert kept
    assert not told_at_once  # the holder is not interrupted...
    assert isinstance(reason, LockLostError)  # ...its next renewal tells it
