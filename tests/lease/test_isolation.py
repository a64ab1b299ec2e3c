"""One lease never hurts another (issue #11): a hanging store call or a slow callback stays its own.

Real clock, real threads: the sync runtime's timer thread only enqueues; store calls run on
the store's own pool, user callbacks on the lease's strand of the callback pool.
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING

import pytest

from resilience._lease import LeaseParams, LockOps, acquire_lease
from resilience.stores import MemoryLockStore

if TYPE_CHECKING:
    from collections.abc import Sequence

TTL = 1.0
"""Renewals every 1/3 s: a healthy lease is lost only if its renewals starve for most of a second
(a loaded 2-core machine starved a 0.3 s ttl's, which measured the load, not the isolation)."""
SLACK = 0.5
"""How late a loss may be told on a loaded machine: well below the 1 s callbacks and the 30 s hang
that a lease stuck behind another's would wait for."""


class HangingStore(MemoryLockStore):
    """Every renewal blocks until `release_all` (a black-holed connection without a timeout)."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = threading.Event()

    def renew(self, key: str, owner: str, ttl: float) -> bool:
        self.gate.wait(30)
        return False


class HangingBatchStore(MemoryLockStore):
    """A subclass with its own `renew_many` that blocks: its batches must not run on the timer thread."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = threading.Event()

    def renew_many(self, items: Sequence[tuple[str, str, float]]) -> list[bool | Exception]:
        self.gate.wait(30)
        return [False] * len(items)


class AnsweringFalse(MemoryLockStore):
    """Every renewal answers False (the lease is gone) and records when it answered."""

    def __init__(self) -> None:
        super().__init__()
        self.answered: dict[str, float] = {}

    def renew(self, key: str, owner: str, ttl: float) -> bool:
        self.answered[key] = time.monotonic()
        return False


def _acquire(store: MemoryLockStore, key: str, **params: object) -> object:
    lease, _ = acquire_lease(
        LockOps(store),
        key,
        params=LeaseParams(ttl=TTL, renew_interval=TTL / 3, **params),  # type: ignore[arg-type]
        schedule=None,
        time_provider=store.time_provider,
        signal=None,
    )
    assert lease is not None
    return lease


@pytest.mark.timeout(60)
@pytest.mark.parametrize("kind", [HangingStore, HangingBatchStore], ids=["renew", "renew_many"])
def test_a_hanging_store_never_costs_a_lease_on_another_store(kind: type[HangingStore | HangingBatchStore]) -> None:
    hanging = kind()
    healthy = MemoryLockStore()
    try:
        stuck = _acquire(hanging, "stuck")
        started = time.monotonic()
        leases = [_acquire(healthy, f"k{i}") for i in range(20)]
        stuck_lost_at = None
        while time.monotonic() - started < 3 * TTL:
            if stuck_lost_at is None and stuck.lost:  # type: ignore[attr-defined]
                stuck_lost_at = time.monotonic() - started
            assert not any(lease.lost for lease in leases)  # type: ignore[attr-defined]
            time.sleep(0.005)
        assert stuck_lost_at is not None
        assert stuck_lost_at <= TTL + SLACK, f"the hanging lease was declared lost at {stuck_lost_at:.3f}s"
        for lease in leases:
            assert lease.finish() is None  # type: ignore[attr-defined]
    finally:
        hanging.gate.set()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("slow", ["signal-callback", "on_lost"])
def test_a_slow_callback_never_delays_another_leases_loss(slow: str) -> None:
    store = AnsweringFalse()
    told: dict[str, float] = {}

    def sleep_1s(*_args: object) -> None:
        time.sleep(1.0)

    a = _acquire(store, "a", on_lost=sleep_1s if slow == "on_lost" else None)
    if slow == "signal-callback":
        a.signal.add_callback(sleep_1s)  # type: ignore[attr-defined]
    time.sleep(0.05)  # B's renewal is answered 50 ms after A's, while A's callback sleeps
    b = _acquire(store, "b")
    b.signal.add_callback(lambda _reason: told.setdefault("b", time.monotonic()))  # type: ignore[attr-defined]
    assert b.signal.wait(5)  # type: ignore[attr-defined]
    deadline = time.monotonic() + 2
    while "b" not in told and time.monotonic() < deadline:
        time.sleep(0.001)
    delay = told["b"] - store.answered["b"]
    assert delay <= SLACK, f"B's loss was told {delay * 1000:.1f} ms after its renewal answered"
    for lease in (a, b):
        lease.finish()  # type: ignore[attr-defined]


def test_a_slow_callback_on_a_timeouts_signal_never_holds_the_timer_thread() -> None:
    """A sync timeout fires on the shared timer thread; the callbacks on its signal run elsewhere.

    The callable sees the abort at once; a callback that sleeps 1 s delays neither another
    timeout nor a lease's events on the same thread.
    """
    from resilience import ResiliencePipelineBuilder, TimeoutRejectedError, get_context

    slow = ResiliencePipelineBuilder().add_timeout(0.05).build()
    quick = ResiliencePipelineBuilder().add_timeout(0.1).build()
    callback_threads: list[str] = []
    seen: dict[str, float] = {}

    def sleeps_in_its_callback() -> None:
        context = get_context()
        assert context is not None

        def sleep_1s(_reason: BaseException) -> None:
            callback_threads.append(threading.current_thread().name)
            time.sleep(1.0)

        context.signal.add_callback(sleep_1s)
        assert context.signal.wait(5)
        seen["slow"] = time.monotonic()
        context.signal.raise_if_aborted()

    def waits() -> None:
        context = get_context()
        assert context is not None
        started = time.monotonic()
        assert context.signal.wait(5)
        seen["quick"] = time.monotonic() - started
        context.signal.raise_if_aborted()

    def run_slow() -> None:
        with pytest.raises(TimeoutRejectedError):
            slow.execute(sleeps_in_its_callback)

    worker = threading.Thread(target=run_slow)
    worker.start()
    with pytest.raises(TimeoutRejectedError):
        quick.execute(waits)
    worker.join(5)
    # It fired on time, not after the other timeout's 1 s callback (room for a loaded machine).
    assert seen["quick"] < 0.5, f"the second timeout fired {seen['quick']:.3f}s after it started"
    assert callback_threads
    assert callback_threads[0] != "resilience-timer"
