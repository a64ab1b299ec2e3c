"""The rate-limit decisions as pure code, and MemoryRateLimitStore on a fake clock: exact."""

from __future__ import annotations

import asyncio
import gc
import threading
import weakref
from collections import deque

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from resilience import ValidationError
from resilience.limiters import AsyncRateLimitStore, MemoryRateLimitStore, RateLimitAlgorithm, RateLimitStore
from resilience.limiters._algorithms import check_take, fixed_window, sliding_window, token_bucket
from resilience.stores import serves
from resilience.testing import FakeTimeProvider

# -- pure decisions -----------------------------------------------------------------------------


def test_token_bucket_grants_the_burst_then_one_per_interval() -> None:
    """GCRA with burst 3 and 0.5 s per permit: three at once, then the exact wait of the next."""
    tat = None
    for _ in range(3):
        tat, wait = token_bucket(tat, 10.0, 0.5, 3, 1)
        assert wait == 0.0
    assert tat == 11.5
    kept, wait = token_bucket(tat, 10.0, 0.5, 3, 1)
    assert (kept, wait) == (11.5, 0.5)  # refused: state unchanged
    tat, wait = token_bucket(tat, 10.5, 0.5, 3, 1)
    assert (tat, wait) == (12.0, 0.0)


def test_token_bucket_refills_to_its_burst_only() -> None:
    """A long pause refills the bucket up to `burst`, never beyond."""
    tat, _ = token_bucket(None, 0.0, 1.0, 2, 2)
    granted = 0
    now = 100.0
    while True:
        tat, wait = token_bucket(tat, now, 1.0, 2, 1)
        if wait:
            break
        granted += 1
    assert granted == 2
    assert wait == 1.0


def test_token_bucket_several_permits_cost_several_intervals() -> None:
    """Taking 3 of a burst of 4 leaves one; the next 2 wait one interval."""
    tat, wait = token_bucket(None, 0.0, 0.25, 4, 3)
    assert (tat, wait) == (0.75, 0.0)
    _, wait = token_bucket(tat, 0.0, 0.25, 4, 2)
    assert wait == 0.25


def test_sliding_window_counts_the_last_period() -> None:
    """At most `limit` grants in any `per` seconds; the wait is until the oldest needed leaves."""
    log: deque[float] = deque()
    assert [sliding_window(log, t, 1.0, 3, 1) for t in (0.0, 0.2, 0.4)] == [0.0, 0.0, 0.0]
    assert sliding_window(log, 0.5, 1.0, 3, 1) == pytest.approx(0.5)
    assert sliding_window(log, 0.5, 1.0, 3, 2) == pytest.approx(0.7)  # two must leave: 0.0 and 0.2
    assert sliding_window(log, 1.0, 1.0, 3, 1) == 0.0  # 0.0 left exactly at 1.0
    assert list(log) == [0.2, 0.4, 1.0]


def test_fixed_window_opens_at_the_first_request() -> None:
    """A window of `per` starts with the first request and grants `limit`; then the wait is its end."""
    window, wait = fixed_window(None, 3.0, 2.0, 2, 1)
    assert (window, wait) == ([5.0, 1], 0.0)
    window, wait = fixed_window(window, 4.0, 2.0, 2, 1)
    assert (window, wait) == ([5.0, 2], 0.0)
    window, wait = fixed_window(window, 4.5, 2.0, 2, 1)
    assert wait == 0.5
    window, wait = fixed_window(window, 5.0, 2.0, 2, 2)  # a new window at 5.0
    assert (window, wait) == ([7.0, 2], 0.0)


@pytest.mark.parametrize(
    ("arguments", "problem"),
    [
        ((3, 1, 1.0, None, "token_bucket", 1), "key: must be a str"),
        (("k", 0, 1.0, None, "token_bucket", 1), "limit: must be an int >= 1"),
        (("k", True, 1.0, None, "token_bucket", 1), "limit: must be an int >= 1"),
        (("k", 1, 0, None, "token_bucket", 1), "per: must be a positive, finite"),
        (("k", 1, float("inf"), None, "token_bucket", 1), "per: must be a positive, finite"),
        (("k", 1, float("nan"), None, "token_bucket", 1), "per: must be a positive, finite"),
        (("k", 1, "1", None, "token_bucket", 1), "per: must be a positive, finite"),
        (("k", 1, 1.0, 0, "token_bucket", 1), "burst: must be None or an int >= 1"),
        (("k", 1, 1.0, None, "leaky", 1), "algorithm: must be one of"),
        (("k", 1, 1.0, None, "token_bucket", 0), "permits: must be an int >= 1"),
        (("k", 5, 1.0, 2, "token_bucket", 3), "permits: 3 can never be granted: at most 2"),
        (("k", 5, 1.0, 9, "fixed_window", 6), "permits: 6 can never be granted: at most 5"),
    ],
)
def test_check_take_names_the_bad_argument(arguments: tuple[object, ...], problem: str) -> None:
    """Every bad argument of `take` is described, naming it."""
    found = check_take(*arguments)
    assert found is not None
    assert found.startswith(problem)


@settings(max_examples=60, deadline=None)
@given(
    limit=st.integers(1, 6),
    gaps=st.lists(st.integers(0, 400), min_size=1, max_size=80),
    permits=st.integers(1, 3),
)
def test_sliding_window_never_exceeds_limit_in_any_period(limit: int, gaps: list[int], permits: int) -> None:
    """Whatever the arrival times, no `per`-long interval holds more than `limit` permits."""
    per = 1.0
    permits = min(permits, limit)
    log: deque[float] = deque()
    granted: list[float] = []
    now = 0.0
    for gap in gaps:
        now += gap / 1000
        if sliding_window(log, now, per, limit, permits) == 0.0:
            granted.extend([now] * permits)
    for start in granted:
        assert sum(1 for t in granted if start <= t < start + per - 1e-9) <= limit


@settings(max_examples=60, deadline=None)
@given(
    limit=st.integers(1, 10),
    burst=st.integers(1, 10),
    gaps=st.lists(st.integers(0, 300), min_size=1, max_size=80),
)
def test_token_bucket_bound_and_exact_wait(limit: int, burst: int, gaps: list[int]) -> None:
    """In any interval of length t at most burst + t*rate permits; after the wait told, a grant."""
    interval = 1.0 / limit
    tat: float | None = None
    granted: list[float] = []
    now = 0.0
    for gap in gaps:
        now += gap / 1000
        tat, wait = token_bucket(tat, now, interval, burst, 1)
        if wait == 0.0:
            granted.append(now)
        else:
            # Taking at now + wait succeeds (the retry-after is exact), and not a microsecond earlier.
            assert token_bucket(tat, now + wait, interval, burst, 1)[1] == 0.0
            assert token_bucket(tat, now + wait - 1e-6, interval, burst, 1)[1] > 0.0
    for i, start in enumerate(granted):
        for end in granted[i:]:
            count = sum(1 for t in granted if start <= t <= end)
            assert count <= burst + (end - start) / interval + 1e-6


# -- MemoryRateLimitStore -----------------------------------------------------------------------


def test_memory_store_offers_both_protocols() -> None:
    """The memory store is a RateLimitStore and an AsyncRateLimitStore."""
    store = MemoryRateLimitStore()
    assert serves(store, RateLimitStore)
    assert serves(store, AsyncRateLimitStore)
    assert "MemoryRateLimitStore" in repr(store)


def test_memory_token_bucket_is_exact_on_a_fake_clock() -> None:
    """10 per second: ten at once, the eleventh told 0.1 s, and granted exactly then."""
    clock = FakeTimeProvider()
    store = MemoryRateLimitStore(clock)
    assert [store.take("a", 10, 1.0) for _ in range(10)] == [0.0] * 10
    wait = store.take("a", 10, 1.0)
    assert wait == pytest.approx(0.1)
    clock.advance(wait)
    assert store.take("a", 10, 1.0) == 0.0
    assert store.take("a", 10, 1.0) == pytest.approx(0.1)
    assert store.take("b", 10, 1.0) == 0.0  # another partition


def test_memory_burst_and_permits() -> None:
    """burst caps what may go back to back; several permits at once cost several intervals."""
    clock = FakeTimeProvider()
    store = MemoryRateLimitStore(clock)
    assert store.take("a", 10, 1.0, 2) == 0.0
    assert store.take("a", 10, 1.0, 2) == 0.0
    assert store.take("a", 10, 1.0, 2) == pytest.approx(0.1)
    clock.advance(10)
    assert store.take("a", 10, 1.0, 4, "token_bucket", 4) == 0.0
    assert store.take("a", 10, 1.0, 4, "token_bucket", 2) == pytest.approx(0.2)


def test_memory_sliding_window_on_a_fake_clock() -> None:
    """3 per 2 s: grants at 0, 0.5, 1.0; the fourth waits until the first leaves at 2.0."""
    clock = FakeTimeProvider()
    store = MemoryRateLimitStore(clock)
    for _ in range(3):
        assert store.take("s", 3, 2.0, None, "sliding_window") == 0.0
        clock.advance(0.5)
    wait = store.take("s", 3, 2.0, None, "sliding_window")
    assert wait == pytest.approx(0.5)
    clock.advance(wait)
    assert store.take("s", 3, 2.0, None, "sliding_window") == 0.0


def test_memory_fixed_window_on_a_fake_clock() -> None:
    """2 per 1 s: the window opened at 0.3 ends at 1.3."""
    clock = FakeTimeProvider(0.3)
    store = MemoryRateLimitStore(clock)
    assert store.take("f", 2, 1.0, None, "fixed_window") == 0.0
    clock.advance(0.5)
    assert store.take("f", 2, 1.0, None, "fixed_window") == 0.0
    assert store.take("f", 2, 1.0, None, "fixed_window") == pytest.approx(0.5)
    clock.advance(0.5)
    assert store.take("f", 2, 1.0, None, "fixed_window") == 0.0


def test_memory_take_async_decides_the_same() -> None:
    """take_async is take, awaited."""
    clock = FakeTimeProvider()
    store = MemoryRateLimitStore(clock)

    async def run() -> list[float]:
        return [await store.take_async("a", 1, 1.0) for _ in range(2)]

    assert asyncio.run(run()) == [0.0, 1.0]


@pytest.mark.parametrize(
    "arguments",
    [(3, 1, 1.0), ("k", 0, 1.0), ("k", 1, -1.0), ("k", 1, 1.0, None, "leaky"), ("k", 2, 1.0, 1, "token_bucket", 2)],
)
def test_memory_refuses_bad_arguments(arguments: tuple[object, ...]) -> None:
    """Bad arguments raise ValidationError before anything is taken, every time."""
    store = MemoryRateLimitStore(FakeTimeProvider())
    for _ in range(2):
        with pytest.raises(ValidationError):
            store.take(*arguments)  # type: ignore[arg-type]
    assert len(store) == 0


def test_memory_stays_bounded_with_unbounded_keys() -> None:
    """Partitions whose state expired are swept: memory follows the live keys, not all keys ever seen."""
    clock = FakeTimeProvider()
    store = MemoryRateLimitStore(clock)
    for round_ in range(5):
        for i in range(3000):
            key = f"{round_}:{i}"
            store.take(key, 10, 1.0)
            store.take(key, 10, 1.0, None, "sliding_window")
            store.take(key, 10, 1.0, None, "fixed_window")
        clock.advance(2.0)
    assert len(store) < 3 * 2 * 3000 + 100


def test_memory_is_exact_under_threads() -> None:
    """Eight threads hammering one partition of 100 per hour get exactly 100 permits."""
    store = MemoryRateLimitStore(FakeTimeProvider())
    granted: list[int] = []
    lock = threading.Lock()

    def hammer() -> None:
        mine = sum(
            1
            for _ in range(200)
            for algorithm in ("token_bucket", "sliding_window", "fixed_window")
            if store.take(f"k-{algorithm}", 100, 3600.0, None, algorithm) == 0.0  # type: ignore[arg-type]
        )
        with lock:
            granted.append(mine)

    threads = [threading.Thread(target=hammer) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert sum(granted) == 3 * 100


def test_decider_matches_take() -> None:
    """The strategy's shortcut decides as take() does, on the same state."""
    clock = FakeTimeProvider()
    store = MemoryRateLimitStore(clock)
    for algorithm, wait in (("token_bucket", 0.5), ("sliding_window", 1.0), ("fixed_window", 1.0)):
        decide = store._decider(2, 1.0, None, algorithm)  # type: ignore[arg-type]
        assert decide("k") == 0.0
        assert store.take("k", 2, 1.0, None, algorithm) == 0.0  # type: ignore[arg-type]
        assert decide("k") == pytest.approx(wait)
    with pytest.raises(ValidationError):
        store._decider(0, 1.0, None, "token_bucket")


def test_a_bool_limit_is_refused_even_after_the_same_int_limit() -> None:
    """`True == 1` and hashes alike: the memory store's checked-arguments cache must not let it through."""
    store = MemoryRateLimitStore(FakeTimeProvider())
    assert store.take("b", 1, 1.0) == 0.0
    with pytest.raises(ValidationError, match="limit"):
        store.take("b", True, 1.0)  # type: ignore[arg-type]


@pytest.mark.parametrize("algorithm", ["token_bucket", "sliding_window", "fixed_window"])
def test_a_dropped_store_is_freed_by_refcounting_alone(algorithm: RateLimitAlgorithm) -> None:
    """The store's cache of deciders holds the store's state, never the store: no cycle for the collector."""

    class Watched(MemoryRateLimitStore):
        __slots__ = ("__weakref__",)

    store = Watched(FakeTimeProvider())
    assert store.take("k", 5, 1.0, None, algorithm) == 0.0  # caches the decider of these arguments
    gone = weakref.ref(store)
    gc.disable()
    try:
        del store
        assert gone() is None
    finally:
        gc.enable()
