"""Helpers for the lock tests: a fault-injecting memory store, clocks that step, event capture."""

from __future__ import annotations

import asyncio
import threading
from typing import TYPE_CHECKING, Any

from resilience import ResiliencePipeline, ResiliencePipelineBuilder
from resilience._lease import wait_idle
from resilience.stores import MemoryLockStore
from resilience.telemetry import TelemetryEvent, TelemetryOptions

if TYPE_CHECKING:
    from resilience.testing import FakeTimeProvider


class FaultyStore(MemoryLockStore):
    """A memory store whose calls are recorded and that can be told to fail, hang or lie."""

    def __init__(self, clock: FakeTimeProvider) -> None:
        super().__init__(clock)
        self.calls: list[tuple[str, str, str]] = []
        self.acquire_error: BaseException | None = None
        self.renew_error: Exception | None = None
        self.renew_answer: bool | None = None
        self.renew_gate: threading.Event | None = None
        self.async_renew_gate: asyncio.Event | None = None
        self.release_error: Exception | None = None
        self.release_answer: bool | None = None
        self.async_release_gate: asyncio.Event | None = None
        self.async_acquire_gate: asyncio.Event | None = None
        self.renew_cancelled = 0

    def count(self, method: str) -> int:
        return sum(1 for call in self.calls if call[0] == method)

    def owners(self, method: str) -> list[str]:
        return [call[2] for call in self.calls if call[0] == method]

    def steal(self, key: str, thief: str = "thief") -> int | None:
        """Drop the current lease (as if it expired early) and give the key to someone else."""
        with self._mutex:
            self._leases.pop(key, None)
        return super().acquire_or_ttl(key, thief, 30.0)[0]

    def acquire_or_ttl(self, key: str, owner: str, ttl: float) -> tuple[int | None, float | None]:
        self.calls.append(("acquire", key, owner))
        if self.acquire_error is not None:
            raise self.acquire_error
        return super().acquire_or_ttl(key, owner, ttl)

    async def acquire_or_ttl_async(self, key: str, owner: str, ttl: float) -> tuple[int | None, float | None]:
        if self.async_acquire_gate is not None:
            self.calls.append(("acquire-wait", key, owner))
            await self.async_acquire_gate.wait()
        return self.acquire_or_ttl(key, owner, ttl)

    def acquire_or_queue(self, key: str, owner: str, ttl: float) -> tuple[int | None, float | None]:
        # A waiter's attempt (it joins the fair queue when refused): recorded as an acquire.
        self.calls.append(("acquire", key, owner))
        if self.acquire_error is not None:
            raise self.acquire_error
        return super().acquire_or_queue(key, owner, ttl)

    async def acquire_or_queue_async(self, key: str, owner: str, ttl: float) -> tuple[int | None, float | None]:
        if self.async_acquire_gate is not None:
            self.calls.append(("acquire-wait", key, owner))
            await self.async_acquire_gate.wait()
        return self.acquire_or_queue(key, owner, ttl)

    def renew(self, key: str, owner: str, ttl: float) -> bool:
        self.calls.append(("renew", key, owner))
        if self.renew_gate is not None:
            self.renew_gate.wait(10)
        if self.renew_error is not None:
            raise self.renew_error
        if self.renew_answer is not None:
            return self.renew_answer
        return super().renew(key, owner, ttl)

    async def renew_async(self, key: str, owner: str, ttl: float) -> bool:
        if self.async_renew_gate is not None:
            try:
                await self.async_renew_gate.wait()
            except asyncio.CancelledError:
                self.renew_cancelled += 1
                raise
        return self.renew(key, owner, ttl)

    def release(self, key: str, owner: str) -> bool:
        self.calls.append(("release", key, owner))
        if self.release_error is not None:
            raise self.release_error
        answer = super().release(key, owner)
        return answer if self.release_answer is None else self.release_answer

    async def release_async(self, key: str, owner: str) -> bool:
        if self.async_release_gate is not None:
            await self.async_release_gate.wait()
        return self.release(key, owner)


class PlainStore:
    """A store with only the core sync and async lock protocols (no lease info, no notification)."""

    def __init__(self, inner: MemoryLockStore) -> None:
        self.inner = inner

    def acquire(self, key: str, owner: str, ttl: float) -> int | None:
        return self.inner.acquire(key, owner, ttl)

    def renew(self, key: str, owner: str, ttl: float) -> bool:
        return self.inner.renew(key, owner, ttl)

    def release(self, key: str, owner: str) -> bool:
        return self.inner.release(key, owner)

    async def acquire_async(self, key: str, owner: str, ttl: float) -> int | None:
        return self.inner.acquire(key, owner, ttl)

    async def renew_async(self, key: str, owner: str, ttl: float) -> bool:
        return self.inner.renew(key, owner, ttl)

    async def release_async(self, key: str, owner: str) -> bool:
        return self.inner.release(key, owner)


class NotifyingStore(PlainStore):
    """A plain store that also offers the blocking `wait_released` (but no release listener)."""

    def wait_released(self, key: str, timeout: float) -> bool:
        return self.inner.wait_released(key, timeout)


class AsyncOnlyStore:
    """A store with only the asyncio protocol."""

    def __init__(self, inner: MemoryLockStore) -> None:
        self.inner = inner

    async def acquire_async(self, key: str, owner: str, ttl: float) -> int | None:
        return self.inner.acquire(key, owner, ttl)

    async def renew_async(self, key: str, owner: str, ttl: float) -> bool:
        return self.inner.renew(key, owner, ttl)

    async def release_async(self, key: str, owner: str) -> bool:
        return self.inner.release(key, owner)


class SyncOnlyStore:
    """A store with only the sync protocol."""

    def __init__(self, inner: MemoryLockStore) -> None:
        self.inner = inner

    def acquire(self, key: str, owner: str, ttl: float) -> int | None:
        return self.inner.acquire(key, owner, ttl)

    def renew(self, key: str, owner: str, ttl: float) -> bool:
        return self.inner.renew(key, owner, ttl)

    def release(self, key: str, owner: str) -> bool:
        return self.inner.release(key, owner)


class Events:
    """A telemetry listener that keeps every event."""

    def __init__(self) -> None:
        self.events: list[TelemetryEvent] = []
        self._lock = threading.Lock()

    def __call__(self, event: TelemetryEvent) -> None:
        with self._lock:
            self.events.append(event)

    def names(self) -> list[str]:
        with self._lock:
            return [e.name for e in self.events if not e.name.startswith("Pipeline")]

    def named(self, name: str) -> list[TelemetryEvent]:
        with self._lock:
            return [e for e in self.events if e.name == name]


def build(clock: FakeTimeProvider, events: Events | None = None, key: Any = "job", **lock: Any) -> ResiliencePipeline:
    """A pipeline with one lock strategy on `clock`."""
    telemetry = TelemetryOptions(listeners=[events]) if events is not None else None
    return ResiliencePipelineBuilder(time_provider=clock, telemetry=telemetry).add_lock(key, **lock).build()


def idle() -> None:
    """Wait until the shared renewer thread has run every queued job."""
    assert wait_idle(10)


def step(clock: FakeTimeProvider, seconds: float, dt: float = 0.05) -> None:
    """Advance a fake clock in small steps, letting the renewer catch up after each."""
    idle()
    moved = 0.0
    while moved < seconds - 1e-12:
        delta = min(dt, seconds - moved)
        clock.advance(delta)
        moved += delta
        idle()


async def settle(rounds: int = 10) -> None:
    """Let ready tasks and callbacks of the loop run."""
    for _ in range(rounds):
        await asyncio.sleep(0)


async def astep(clock: FakeTimeProvider, seconds: float, dt: float = 0.05) -> None:
    """Advance a fake clock in small steps on the loop, letting renewal tasks run after each."""
    await settle()
    moved = 0.0
    while moved < seconds - 1e-12:
        delta = min(dt, seconds - moved)
        clock.advance(delta)
        moved += delta
        await settle()
