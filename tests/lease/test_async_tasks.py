"""Async leases on 3.11-3.13: every store call that may suspend runs inside a task of its own.

A store call may enter `asyncio.timeout` (redis-py does), which needs a current task and cancels
the task that entered it. Before the fix, a renewal's first step ran in a loop callback (no task:
`RuntimeError('Timeout should be used inside a task')` on every renewal), and a release's first
step ran in the caller's task (a release that timed out cancelled the caller).
"""

from __future__ import annotations

import asyncio

from resilience import ResiliencePipelineBuilder
from resilience.stores import MemoryLockStore
from resilience.telemetry import TelemetryOptions
from tests.unit.lockkit import Events


class TimeoutStore:
    """An async lock store whose calls run under `asyncio.timeout`, as redis-py's do."""

    def __init__(self, *, release_delay: float = 0.0, timeout: float = 1.0) -> None:
        self.inner = MemoryLockStore()
        self.release_delay = release_delay
        self.timeout = timeout
        self.renewals = 0

    async def acquire_async(self, key: str, owner: str, ttl: float) -> int | None:
        async with asyncio.timeout(self.timeout):
            await asyncio.sleep(0)
            return self.inner.acquire(key, owner, ttl)

    async def renew_async(self, key: str, owner: str, ttl: float) -> bool:
        async with asyncio.timeout(self.timeout):
            await asyncio.sleep(0)
            self.renewals += 1
            return self.inner.renew(key, owner, ttl)

    async def release_async(self, key: str, owner: str) -> bool:
        async with asyncio.timeout(self.timeout):
            await asyncio.sleep(self.release_delay)
            return self.inner.release(key, owner)


async def test_renewals_under_asyncio_timeout_never_fail() -> None:
    events = Events()
    store = TimeoutStore()
    pipeline = (
        ResiliencePipelineBuilder(telemetry=TelemetryOptions(listeners=[events]))
        .add_lock("k", ttl=0.9, store=store)
        .build()
    )

    async def body() -> str:
        await asyncio.sleep(1.2)
        return "done"

    # Renewals every 0.3 s: a loaded machine may delay one (a 0.15 s ttl was lost to that), and
    # a renewal that fails as the bug did never counts.
    assert await pipeline.execute_async(body) == "done"
    assert store.renewals >= 2
    assert events.named("OnLockRenewalFailed") == []
    assert events.named("OnLockLost") == []


async def test_a_release_that_times_out_does_not_cancel_the_caller() -> None:
    store = TimeoutStore(release_delay=10.0, timeout=0.05)
    pipeline = ResiliencePipelineBuilder().add_lock("k", ttl=5.0, store=store).build()

    async def body() -> str:
        return "done"

    assert await pipeline.execute_async(body) == "done"
    task = asyncio.current_task()
    assert task is not None
    assert task.cancelling() == 0
    await asyncio.sleep(0.1)  # a stray cancellation would land here
