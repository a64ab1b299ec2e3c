"""Hypothesis: random interleavings of acquire/renew/release/time never break the store's invariants."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from resilience.stores import MemoryLockStore
from resilience.testing import FakeTimeProvider

OWNERS = ["a", "b", "c"]
KEYS = ["x", "y"]

operations = st.lists(
    st.one_of(
        st.tuples(st.just("acquire"), st.sampled_from(KEYS), st.sampled_from(OWNERS), st.sampled_from([0.5, 1.0, 2.0])),
        st.tuples(st.just("renew"), st.sampled_from(KEYS), st.sampled_from(OWNERS), st.sampled_from([0.5, 1.0])),
        st.tuples(st.just("release"), st.sampled_from(KEYS), st.sampled_from(OWNERS), st.just(0.0)),
        st.tuples(st.just("advance"), st.just(""), st.just(""), st.sampled_from([0.1, 0.4, 0.999, 1.0, 1.5])),
    ),
    max_size=60,
)


@settings(max_examples=300, deadline=None)
@given(operations)
def test_the_store_matches_a_simple_model(ops: list[tuple[str, str, str, float]]) -> None:
    """One holder per key, tokens only increase, renew never re-acquires, release only by the owner."""
    clock = FakeTimeProvider()
    store = MemoryLockStore(clock)
    model: dict[str, tuple[str, int, float]] = {}  # key -> (owner, token, expires)
    last_token = 0
    for op, key, owner, value in ops:
        now = clock.monotonic()
        live = {k: lease for k, lease in model.items() if lease[2] > now}
        if op == "advance":
            clock.advance(value)
            continue
        held = live.get(key)
        if op == "acquire":
            token = store.acquire(key, owner, value)
            if held is None:
                assert token is not None
                assert token > last_token
                last_token = token
                model[key] = (owner, token, now + value)
            elif held[0] == owner:
                assert token == held[1]
                model[key] = (owner, token, now + value)
            else:
                assert token is None
        elif op == "renew":
            ok = store.renew(key, owner, value)
            assert ok == (held is not None and held[0] == owner)
            if ok:
                model[key] = (owner, held[1], now + value)  # type: ignore[index]
        else:
            ok = store.release(key, owner)
            assert ok == (held is not None and held[0] == owner)
            if ok:
                del model[key]
    now = clock.monotonic()
    assert len(store) >= sum(1 for lease in model.values() if lease[2] > now)
