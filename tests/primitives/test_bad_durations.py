"""Durations no lease can use: a heartbeat below its floor, a number too large for a float.

Each raises `ValidationError` naming its option before any lock is taken — never a renewal
storm from a typo (`heartbeat=1e-9`), never a raw `OverflowError` (`ttl=10**400`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from resilience import ResiliencePipelineBuilder, ValidationError
from resilience.primitives import lock, semaphore
from resilience.stores import MemoryLockStore, MemorySemaphoreStore
from tests.unit.lockkit import FaultyStore

if TYPE_CHECKING:
    from resilience.testing import FakeTimeProvider

HUGE = 10**400
"""An int no float can hold."""


@pytest.mark.parametrize("option", ["ttl", "retry_delay", "wait", "heartbeat"])
@pytest.mark.parametrize("kind", ["lock", "semaphore"])
def test_a_duration_too_large_for_a_float_is_a_validation_error(
    clock: FakeTimeProvider, option: str, kind: str
) -> None:
    """`run`, `hold` and `acquire` (where it applies) name the option; the store is never called."""
    store = FaultyStore(clock)
    made: Any = lock(store) if kind == "lock" else semaphore(MemorySemaphoreStore(clock), limit=2)
    kwargs = {option: HUGE}
    with pytest.raises(ValidationError, match=f"^{option}: "):
        made.run("k", lambda _handle: None, **kwargs)
    with pytest.raises(ValidationError, match=f"^{option}: "):
        made.hold("k", **kwargs)
    if option != "heartbeat":
        with pytest.raises(ValidationError, match=f"^{option}: "):
            made.acquire("k", **kwargs)
    assert store.calls == []


def test_the_primitives_default_ttl_and_extend_refuse_a_huge_int(clock: FakeTimeProvider) -> None:
    """`lock(client, ttl=...)`, `semaphore(...)` and `handle.extend(ttl)`."""
    store = MemoryLockStore(clock)
    with pytest.raises(ValidationError, match="ttl: "):
        lock(store, ttl=HUGE)
    with pytest.raises(ValidationError, match="ttl: "):
        semaphore(MemorySemaphoreStore(clock), limit=2, ttl=HUGE)
    handle = lock(store).acquire("k")
    assert handle is not None
    with pytest.raises(ValidationError, match="ttl: "):
        handle.extend(HUGE)


@pytest.mark.parametrize("option", ["ttl", "wait"])
def test_the_lock_strategy_refuses_a_huge_int_at_build(clock: FakeTimeProvider, option: str) -> None:
    """`add_lock(ttl=..., wait=...)`: build() names the option."""
    builder = ResiliencePipelineBuilder(time_provider=clock).add_lock(
        "k", store=MemoryLockStore(clock), **{option: HUGE}
    )
    with pytest.raises(ValidationError, match=option):
        builder.build()


@pytest.mark.parametrize(
    ("ttl", "heartbeat"),
    [(1.0, 1e-9), (1.0, 0.0009), (30.0, 0.02), (100.0, 0.05)],
)
def test_a_heartbeat_below_its_floor_is_refused(clock: FakeTimeProvider, ttl: float, heartbeat: float) -> None:
    """heartbeat >= 1 ms and >= ttl/1000: a typo never becomes thousands of renewals a second."""
    store = FaultyStore(clock)
    with pytest.raises(ValidationError, match=r"^heartbeat: .*at least"):
        lock(store, ttl=ttl).run("k", lambda _handle: None, heartbeat=heartbeat)
    with pytest.raises(ValidationError, match=r"^heartbeat: "):
        lock(store, ttl=ttl).hold("k", heartbeat=heartbeat)
    assert store.calls == []


@pytest.mark.parametrize(("ttl", "heartbeat"), [(1.0, 0.001), (30.0, 0.03), (0.004, 0.001)])
def test_a_heartbeat_at_its_floor_is_accepted(clock: FakeTimeProvider, ttl: float, heartbeat: float) -> None:
    """The floor itself is valid."""
    assert lock(MemoryLockStore(clock), ttl=ttl).run("k", lambda _handle: 7, heartbeat=heartbeat) == 7
