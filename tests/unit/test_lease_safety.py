"""Hypothesis: the engine never believes it holds a lease that the store has let go."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from resilience._lease import LeaseParams, LockOps, acquire_lease
from resilience.testing import FakeTimeProvider
from tests.unit.lockkit import FaultyStore, idle

TTL = 1.0

steps = st.lists(
    st.one_of(
        st.tuples(st.just("advance"), st.sampled_from([0.01, 0.05, 0.1, 0.2, 0.34, 0.5, 1.2])),
        st.tuples(st.just("renewals"), st.sampled_from(["ok", "error", "refuse"])),
    ),
    min_size=1,
    max_size=40,
)


@settings(max_examples=150, deadline=None)
@given(steps)
def test_a_lease_believed_held_is_held_in_the_store(plan: list[tuple[str, object]]) -> None:
    """Renewal errors, refusals and clock jumps in any order: while not lost, the store has it for us."""
    clock = FakeTimeProvider()
    store = FaultyStore(clock)
    lease, _ = acquire_lease(
        LockOps(store),
        "k",
        params=LeaseParams(ttl=TTL, renew_interval=TTL / 3),
        schedule=None,
        time_provider=clock,
        signal=None,
    )
    assert lease is not None
    for action, value in plan:
        if action == "renewals":
            store.renew_error = ConnectionError("down") if value == "error" else None
            store.renew_answer = False if value == "refuse" else None
            continue
        assert isinstance(value, float)
        clock.advance(value)
        idle()
        if not lease.lost:
            assert clock.monotonic() < lease._machine.deadline
            with store._mutex:
                held = store._leases.get("k")
            assert held is not None
            assert held[0] == lease.owner
            assert held[2] > clock.monotonic()  # the store's expiry is later than our deadline
            assert not lease.signal.aborted
        else:
            assert lease.signal.reason is lease.error
    error = lease.finish()
    assert (error is None) == (not lease.lost)
    assert store.count("release") == 1


@settings(max_examples=50, deadline=None)
@given(st.lists(st.sampled_from([0.01, 0.05, 0.1, 0.2, 0.3]), min_size=1, max_size=60))
def test_healthy_renewals_never_lose_a_lease(advances: list[float]) -> None:
    """When every renewal succeeds and the renewer keeps up, the lease is never lost."""
    clock = FakeTimeProvider()
    store = FaultyStore(clock)
    lease, _ = acquire_lease(
        LockOps(store),
        "k",
        params=LeaseParams(ttl=TTL, renew_interval=TTL / 3),
        schedule=None,
        time_provider=clock,
        signal=None,
    )
    assert lease is not None
    for value in advances:
        clock.advance(value)
        idle()
        assert not lease.lost
    assert lease.finish() is None
