"""The primitives' time-based `wait=` (DESIGN §2.9 revision 2) and retries that wake-ups do not use up."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from resilience import LockNotAcquiredError, ValidationError
from resilience._lease import SpinSchedule
from resilience.primitives import lock, semaphore
from resilience.stores import MemoryLockStore, MemorySemaphoreStore


def test_wait_gives_up_after_its_budget() -> None:
    locks = lock(MemoryLockStore(), ttl=5)
    holder = locks.acquire("k")
    assert holder is not None
    started = time.monotonic()
    assert locks.acquire("k", wait=0.2) is None
    assert 0.19 <= time.monotonic() - started < 2.0  # the budget, plus slack for a loaded machine
    with pytest.raises(LockNotAcquiredError):
        locks.run("k", lambda _handle: None, wait=0.05)


def test_wait_is_woken_by_the_release() -> None:
    locks = lock(MemoryLockStore(), ttl=5)
    holder = locks.acquire("k")
    assert holder is not None
    timer = threading.Timer(0.05, holder.release)
    timer.start()
    started = time.monotonic()
    with locks.hold("k", wait=5) as handle:
        assert handle.token > holder.token
    assert time.monotonic() - started < 3.0  # woken by the release (0.05 s), long before the 5 s wait
    timer.join()


async def test_wait_async_and_semaphores() -> None:
    locks = lock(MemoryLockStore(), ttl=5)
    holder = await locks.acquire_async("k")
    assert holder is not None
    asyncio.get_running_loop().call_later(0.05, holder.release)
    assert await locks.run_async("k", _token, wait=5) > holder.token
    slots = semaphore(MemorySemaphoreStore(), limit=1, ttl=5)
    first = await slots.acquire_async("s")
    assert first is not None
    assert await slots.acquire_async("s", wait=0.05) is None


async def _token(handle: object) -> int:
    return int(getattr(handle, "token"))  # noqa: B009 - the handle type is not the point here


@pytest.mark.parametrize(
    ("options", "named"),
    [({"wait": 1, "retries": 3}, "wait"), ({"wait": -1}, "wait"), ({"wait": "soon"}, "wait")],
)
def test_bad_wait_is_a_validation_error(options: dict[str, object], named: str) -> None:
    locks = lock(MemoryLockStore(), ttl=5)
    with pytest.raises(ValidationError, match=named):
        locks.acquire("k", **options)  # type: ignore[arg-type]


def test_a_wake_up_by_a_release_does_not_use_up_a_retry() -> None:
    """Within the nominal budget (retries * delay from the first refusal) a woken wait is given back."""
    schedule = SpinSchedule(2, 1.0)
    assert schedule.next_wait(10.0, None) == 1.0
    schedule.woken(10.1)
    assert schedule.left == 2
    assert schedule.next_wait(10.1, None) == 1.0
    assert schedule.next_wait(11.1, None) == 1.0
    schedule.woken(12.5)  # past the budget: no refund
    assert schedule.next_wait(12.5, None) is None
