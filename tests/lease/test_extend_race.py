"""A late renewal reply never overwrites a newer `extend` (regressions of issue #11).

The store below answers the first background renewal 0.3 s after it acted, so the holder's
`extend(EXTEND)` is sent and answered while that renewal (of `TTL`) is in flight. The store's
expiry is then the extend's (it acted last); the holder's local deadline must never be later
than it: a late reply that won would put it `TTL - EXTEND` (2 s) past the store's expiry.

The extend halves the heartbeat (0.5 s): the renewal held back by the one in flight goes
out 0.2 s after the late reply, so the first checks read the deadline that reply left. The
ttls are seconds: a loaded machine that starves the loop or the timer thread for a second
does not lose the lease (with a 0.5 s extend, that held-back renewal had 0.2 s).
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid

import pytest

from resilience.primitives import LockHandle, lock
from resilience.stores import MemoryLockStore

DELAY = 0.3
TTL = 4.0
HEARTBEAT = 1.0
EXTEND = 2.0


class LateReplyStore(MemoryLockStore):
    """Acts on the first background renewal at once, then answers it `DELAY` later."""

    def __init__(self) -> None:
        super().__init__()
        self.in_flight = threading.Event()
        self.answered = threading.Event()
        self._delayed = False

    def _first(self) -> bool:
        if self._delayed:
            return False
        self._delayed = True
        return True

    def expiry(self) -> float:
        with self._mutex:
            (lease,) = self._leases.values()
        return lease[2]

    def renew(self, key: str, owner: str, ttl: float) -> bool:
        answer = super().renew(key, owner, ttl)
        if threading.current_thread() is not threading.main_thread() and self._first():
            self.in_flight.set()
            time.sleep(DELAY)
            self.answered.set()
        return answer

    async def renew_async(self, key: str, owner: str, ttl: float) -> bool:
        answer = super().renew(key, owner, ttl)
        if self._first():
            self.in_flight.set()
            await asyncio.sleep(DELAY)
            self.answered.set()
        return answer


def _check(store: LateReplyStore, handle: LockHandle) -> None:
    """For a while after the late reply: the local deadline stays within the store's expiry."""
    end = time.monotonic() + 0.4
    while time.monotonic() < end:
        # The clock is read before expires_in() reads it: the holder's deadline is at most
        # now + left however long a loaded machine pauses between the two reads.
        now = time.monotonic()
        left = handle.expires_in()
        assert left <= EXTEND + 1e-6, f"expires_in() claims {left:.3f}s after extend({EXTEND})"
        assert now + left <= store.expiry() + 1e-3
        time.sleep(0.01)


def test_a_late_renewal_reply_does_not_undo_an_extend() -> None:
    store = LateReplyStore()

    def body(handle: LockHandle) -> None:
        assert store.in_flight.wait(5)
        assert handle.extend(EXTEND)
        assert store.answered.wait(5)
        _check(store, handle)

    lock(store).run(f"k-{uuid.uuid4().hex}", body, ttl=TTL, heartbeat=HEARTBEAT)  # no LockLostError: kept all along


async def test_a_late_async_renewal_reply_does_not_undo_an_extend() -> None:
    store = LateReplyStore()

    async def body(handle: LockHandle) -> None:
        assert await asyncio.to_thread(store.in_flight.wait, 5)
        assert await handle.extend_async(EXTEND)
        while not store.answered.is_set():
            await asyncio.sleep(0.005)
        end = time.monotonic() + 0.4
        while time.monotonic() < end:
            now = time.monotonic()  # before expires_in() reads the clock, as in _check
            left = handle.expires_in()
            assert left <= EXTEND + 1e-6
            assert now + left <= store.expiry() + 1e-3
            await asyncio.sleep(0.01)

    await lock(store).run_async(f"k-{uuid.uuid4().hex}", body, ttl=TTL, heartbeat=HEARTBEAT)


@pytest.mark.parametrize("ttl", [2.4, 1.6])
def test_an_extend_shorter_than_the_heartbeat_keeps_the_lease(ttl: float) -> None:
    # The new ttls are below the running heartbeat (3 s) yet long enough that a loaded machine
    # (a renewal starved for a second and more, seen at load 20) does not lose them: that would
    # test the load.
    def body(handle: LockHandle) -> bool:
        assert handle.extend(ttl)
        time.sleep(4.0)  # several of the new ttl: the heartbeat (3 s before) follows it
        return handle.lost

    assert lock(MemoryLockStore()).run(f"k-{uuid.uuid4().hex}", body, ttl=9.0) is False
