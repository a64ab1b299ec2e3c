"""Many leases in one process (`make soak`): 10,000 held on a 1 s ttl for 10 s, none lost.

The sync runtime adds no thread per lease: the shared timer thread (a memory store's batches
are renewed on it; another store's on its pool thread). 30,000 renewals a second in one Python process go
out in batches (one store call for the renewals due within a few milliseconds); a smaller,
fast version of the same mechanism runs in the suite (`tests/lease/test_batching.py`).
"""

from __future__ import annotations

import asyncio
import os
import threading
import time

import pytest

from resilience._lease import LeaseParams, LockOps, acquire_lease, acquire_lease_async, wait_idle
from resilience.stores import MemoryLockStore

pytestmark = [pytest.mark.soak, pytest.mark.slow]

LEASES = int(os.environ.get("SCALE_LEASES", "10000"))
SECONDS = float(os.environ.get("SCALE_SECONDS", "10"))
TTL = 1.0


@pytest.mark.timeout(600)
def test_ten_thousand_sync_leases_none_lost_no_thread_per_lease() -> None:
    store = MemoryLockStore()
    ops = LockOps(store)
    params = LeaseParams(ttl=TTL, renew_interval=TTL / 3)
    before = threading.active_count()
    leases = []
    for n in range(LEASES):
        lease, _ = acquire_lease(
            ops, f"s{n}", params=params, schedule=None, time_provider=store.time_provider, signal=None
        )
        assert lease is not None
        leases.append(lease)
    time.sleep(SECONDS)
    extra = threading.active_count() - before
    lost = sum(lease.lost for lease in leases)
    for lease in leases:
        lease.finish()
    wait_idle(30)
    print(f"\n{LEASES} sync leases, ttl {TTL}s, {SECONDS}s: lost {lost}, extra threads {extra}")  # noqa: T201 - make soak reports it
    assert lost == 0
    assert extra <= 2  # the timer thread (+1 for the store's pool: the final releases are not batched)


@pytest.mark.timeout(600)
async def test_ten_thousand_async_leases_none_lost() -> None:
    store = MemoryLockStore()
    ops = LockOps(store)
    params = LeaseParams(ttl=TTL, renew_interval=TTL / 3)
    before = threading.active_count()
    leases = []
    for n in range(LEASES):
        lease, _ = await acquire_lease_async(
            ops, f"a{n}", params=params, schedule=None, time_provider=store.time_provider, signal=None
        )
        assert lease is not None
        leases.append(lease)
    await asyncio.sleep(SECONDS)
    lost = sum(lease.lost for lease in leases)
    for lease in leases:
        await lease.finish_async()
    extra = threading.active_count() - before
    print(f"\n{LEASES} async leases, ttl {TTL}s, {SECONDS}s: lost {lost}, extra threads {extra}")  # noqa: T201 - make soak reports it
    assert lost == 0
