"""A holder returns only after a loss recorded by another thread has had its callbacks run.

The timer thread records a loss (a renewal answered False) and hands its callbacks on a moment
later. A body that returns in between must not let the holder return before they have run,
however long the hand-on takes: the test slows it to 1.5 s.
"""

from __future__ import annotations

import threading
import time
import uuid
from typing import Any

import pytest

from resilience import LockLeaseLostError
from resilience._lease import Lease
from resilience.primitives import LockHandle, lock
from resilience.stores import MemoryLockStore

SLOW_HAND_ON = 1.5


@pytest.mark.timeout(30)
def test_a_slow_hand_on_from_another_thread_is_waited_for(monkeypatch: pytest.MonkeyPatch) -> None:
    store = MemoryLockStore()
    key = uuid.uuid4().hex
    holder = threading.current_thread()
    then = Lease._then

    def slow_then(self: Lease, flags: int, **kwargs: Any) -> None:
        if threading.current_thread() is not holder and self.key == key:
            time.sleep(SLOW_HAND_ON)
        then(self, flags, **kwargs)

    monkeypatch.setattr(Lease, "_then", slow_then)
    told = threading.Event()

    def body(handle: LockHandle) -> None:
        handle.signal.add_callback(lambda _reason: told.set())
        assert store.force_release(f"lock:{key}")
        deadline = time.monotonic() + 20
        while not handle.lost:  # recorded by the renewal on the timer thread; not yet handed on
            assert time.monotonic() < deadline, "the renewal never found the loss"
            time.sleep(0.005)
        assert not told.is_set()

    with pytest.raises(LockLeaseLostError):
        lock(store).run(key, body, ttl=0.2)
    assert told.is_set(), "run returned before the loss's callbacks ran"
