"""Real threads and real asyncio tasks contending for one key, on the system clock."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from resilience import LockNotAcquiredError, ResiliencePipelineBuilder, get_lock_token
from resilience._lease._workers import STORE_THREADS, store_pool
from resilience.stores import MemoryLockStore

N = 8


def test_wait_zero_lets_exactly_one_thread_run() -> None:
    """Fail fast: of N threads arriving together, one runs, the others are rejected."""
    pipeline = ResiliencePipelineBuilder().add_lock("t:one", store=MemoryLockStore()).build()
    barrier = threading.Barrier(N)
    rejected = threading.Semaphore(0)
    ran: list[int] = []
    errors: list[BaseException] = []

    def work(n: int) -> None:
        # The winner holds the lock until every loser has been turned away.
        for _ in range(N - 1):
            assert rejected.acquire(timeout=10)
        ran.append(n)

    def worker(n: int) -> None:
        barrier.wait()
        try:
            pipeline.execute(work, n)
        except LockNotAcquiredError:
            rejected.release()
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(N)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(20)
    assert errors == []
    assert len(ran) == 1


def test_with_a_wait_budget_every_thread_runs_one_at_a_time() -> None:
    """With wait: all N run, never two at once, each with a larger token than the last."""
    pipeline = ResiliencePipelineBuilder().add_lock("t:all", wait=30, store=MemoryLockStore()).build()
    inside = 0
    overlaps = 0
    tokens: list[int] = []
    guard = threading.Lock()

    def work() -> None:
        nonlocal inside, overlaps
        with guard:
            inside += 1
            overlaps += inside > 1
            tokens.append(get_lock_token() or 0)
        time.sleep(0.005)
        with guard:
            inside -= 1

    threads = [threading.Thread(target=pipeline.execute, args=(work,)) for _ in range(N)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert overlaps == 0
    assert len(tokens) == N
    assert tokens == sorted(tokens)


async def test_wait_zero_lets_exactly_one_task_run() -> None:
    """Fail fast with asyncio tasks: one runs, the others are rejected."""
    pipeline = ResiliencePipelineBuilder().add_lock("a:one", store=MemoryLockStore()).build()
    release = asyncio.Event()

    async def work() -> str:
        await release.wait()
        return "ran"

    tasks = [asyncio.ensure_future(pipeline.settle_async(work)) for _ in range(N)]
    while sum(t.done() for t in tasks) < N - 1:
        await asyncio.sleep(0.001)
    release.set()
    outcomes = await asyncio.gather(*tasks)
    assert sum(o.is_ok for o in outcomes) == 1
    assert all(isinstance(o.error, LockNotAcquiredError) for o in outcomes if not o.is_ok)


async def test_with_a_wait_budget_every_task_runs_one_at_a_time() -> None:
    """With wait: all N tasks run, one at a time."""
    pipeline = ResiliencePipelineBuilder().add_lock("a:all", wait=30, store=MemoryLockStore()).build()
    inside = 0
    overlaps = 0

    async def work() -> None:
        nonlocal inside, overlaps
        inside += 1
        overlaps += inside > 1
        await asyncio.sleep(0.002)
        inside -= 1

    await asyncio.gather(*(pipeline.execute_async(work) for _ in range(N)))
    assert overlaps == 0


def test_renewal_keeps_a_real_lease_alive_past_its_ttl() -> None:
    """On the real clock a 450 ms ttl survives a 1 s job, with no thread of its own.

    (Room for a loaded machine: a renewal every 150 ms tolerates 290 ms of scheduling delay.)
    """
    store = MemoryLockStore()
    pipeline = ResiliencePipelineBuilder().add_lock("t:long", ttl=0.45, store=store).build()

    def job() -> bool:
        time.sleep(1.0)
        return store.acquire("t:long", "other", 1.0) is None

    assert pipeline.execute(job) is True
    # A memory store's renewals run on the timer thread (no hop); its pool serves no renewal.
    assert store_pool(store).threads <= STORE_THREADS
    names = [t.name for t in threading.enumerate()]
    assert names.count("resilience-timer") <= 1


async def test_async_renewal_keeps_a_real_lease_alive_past_its_ttl() -> None:
    """The async twin on the real loop clock."""
    store = MemoryLockStore()
    pipeline = ResiliencePipelineBuilder().add_lock("a:long", ttl=0.45, store=store).build()

    async def job() -> bool:
        await asyncio.sleep(1.0)
        return store.acquire("a:long", "other", 1.0) is None

    assert await pipeline.execute_async(job) is True


def test_a_sync_execution_inside_a_running_loop_still_renews() -> None:
    """A sync execution started from a coroutine blocks the loop: its timers must not use it."""
    store = MemoryLockStore()
    pipeline = ResiliencePipelineBuilder().add_lock("t:inloop", ttl=0.45, store=store).build()

    def job() -> bool:
        time.sleep(1.0)
        return store.acquire("t:inloop", "other", 1.0) is None

    async def main() -> bool:
        return pipeline.execute(job)

    assert asyncio.run(main()) is True


@pytest.mark.parametrize("count", [200])
def test_many_held_leases_share_the_renewer(count: int) -> None:
    """Hundreds of leases held at once renew on the store's pool: no thread per lease."""
    store = MemoryLockStore()
    lost: list[object] = []
    pipeline = (
        ResiliencePipelineBuilder()
        .add_lock(lambda ctx: f"t:many:{ctx.operation_key}", ttl=3.0, store=store, on_lock_lost=lost.append)
        .build()
    )
    before = threading.active_count()
    go = threading.Event()
    held = threading.Semaphore(0)
    from resilience import use_context

    def job() -> None:
        held.release()
        go.wait(10)

    def worker(n: int) -> None:
        with use_context(operation_key=str(n)):
            pipeline.execute(job)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(count)]
    for thread in threads:
        thread.start()
    for _ in range(count):
        assert held.acquire(timeout=10)
    time.sleep(1.2)  # past the first renewal (every ttl/3: a 3 s ttl leaves 2 s for a renewal late under load)
    background = threading.active_count() - before - count
    go.set()
    for thread in threads:
        thread.join(10)
    # The timer thread and the store's pool: one thread while renewals flow, a few more
    # (bounded) only while a burst of them waits on a loaded machine.
    assert background <= 1 + STORE_THREADS
    assert len(store) == 0
    assert lost == []


class _HangingRenewStore(MemoryLockStore):
    """Renewals block (sync) or never answer (async) until `gate` opens."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = threading.Event()

    def renew(self, key: str, owner: str, ttl: float) -> bool:
        self.gate.wait(10)
        return super().renew(key, owner, ttl)

    async def renew_async(self, key: str, owner: str, ttl: float) -> bool:
        await asyncio.sleep(10)
        return super().renew(key, owner, ttl)


def test_the_real_deadline_fires_while_a_renewal_hangs() -> None:
    """On the real clock, the timer thread aborts the signal at the deadline despite the hung renewal."""
    store = _HangingRenewStore()
    pipeline = ResiliencePipelineBuilder().add_lock("t:hang", ttl=0.15, store=store).build()

    def job() -> tuple[bool, float]:
        from resilience import get_context

        context = get_context()
        assert context is not None
        started = time.monotonic()
        aborted = context.signal.wait(5)
        return aborted, time.monotonic() - started

    try:
        aborted, waited = pipeline.execute(job)
    finally:
        store.gate.set()
    assert aborted
    assert waited < 1.0  # the deadline (~0.15 s), not the 10 s renewal


async def test_the_real_async_deadline_fires_while_a_renewal_hangs() -> None:
    """On the real loop clock, the deadline aborts the signal and cancels the hung renewal."""
    store = _HangingRenewStore()
    pipeline = ResiliencePipelineBuilder().add_lock("a:hang", ttl=0.15, store=store).build()

    async def job() -> tuple[bool, float]:
        from resilience import get_context

        context = get_context()
        assert context is not None
        started = time.monotonic()
        aborted = await context.signal.wait_async(5)
        return aborted, time.monotonic() - started

    aborted, waited = await pipeline.execute_async(job)
    assert aborted
    assert waited < 1.0
