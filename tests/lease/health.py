"""After a fault: is the lease runtime of this process still renewing and watching sync leases?"""

from __future__ import annotations

import asyncio
import sys
import threading
import time
import traceback
import uuid

from resilience import LockLostError, ResiliencePipelineBuilder, get_context
from resilience._lease._async import _SCHEDULERS as _ASYNC_SCHEDULERS
from resilience._lease._lease import _LIVE, _LOCK, _STRONG_SCHEDULERS
from resilience._lease._workers import all_pools
from resilience._runtime._timers import TIMER_THREAD, ThreadTimerHandle
from resilience.stores import MemoryLockStore

TTL = 1.0
"""Renewals every 1/3 s: a lease is lost only if they starve for most of a second, which a loaded
2-core machine did to a 0.6 s ttl (the check then measured the load, not the runtime)."""


def _aborted() -> bool:
    context = get_context()
    assert context is not None
    return context.signal.aborted


def assert_runtime_healthy() -> None:
    """A sync lease outliving its ttl is renewed (not lost), and a stolen one is told within ttl."""
    store = MemoryLockStore()
    key = f"health-{uuid.uuid4().hex}"
    pipeline = ResiliencePipelineBuilder().add_lock(key, ttl=TTL, store=store).build()

    def renewed() -> bool:
        time.sleep(1.5 * TTL)  # past the ttl: only renewals keep it
        return _aborted()

    assert pipeline.execute(renewed) is False

    def stolen() -> float:
        with store._mutex:
            store._leases.pop(key)
        assert store.acquire(key, "thief", 30.0) is not None
        started = time.monotonic()
        context = get_context()
        assert context is not None
        assert context.signal.wait(5 * TTL), "the loss was never told"
        assert isinstance(context.signal.reason, LockLostError)
        return time.monotonic() - started

    assert pipeline.execute(stolen) < 2 * TTL  # the strategy returns a body's result even after a loss


async def assert_async_runtime_healthy() -> None:
    """The async twin: renewed past its ttl on this loop."""
    pipeline = ResiliencePipelineBuilder().add_lock(f"health-{uuid.uuid4().hex}", ttl=TTL).build()

    async def renewed() -> bool:
        await asyncio.sleep(1.5 * TTL)
        return _aborted()

    assert await pipeline.execute_async(renewed) is False


def scheduler_problem() -> str | None:
    """Why the system clock's lease scheduler could sleep past its earliest event, else None.

    Its timer must fire by the time it believes itself armed for (or now, for a time already
    past): a timer due later means every sync lease of the process goes unrenewed and unwatched
    (a freezegun freeze once left it due in the frozen year). Checked after every test.
    """
    # Snapshots: another thread's loop may add a scheduler meanwhile (that adds to them unlocked).
    schedulers = [entry[1] for entry in list(_STRONG_SCHEDULERS.values())]
    schedulers += [entry[1] for per_loop in list(_ASYNC_SCHEDULERS.data.values()) for entry in list(per_loop.values())]
    for scheduler in schedulers:
        with _LOCK:
            armed_at, timer = scheduler._armed_at, scheduler._timer
        if not isinstance(timer, ThreadTimerHandle) or timer.cancelled or armed_at == float("inf"):
            continue  # not on the timer thread (a clock of its own), nothing armed, or firing now
        now = TIMER_THREAD.monotonic()
        if timer.when - max(armed_at, now) > 1.0:  # set for the scheduler's time (or at once), never later
            return (
                f"a lease scheduler on {scheduler._tp!r} believes itself armed in {armed_at - now:.3f} s"
                f" but its timer fires in {timer.when - now:.3f} s"
            )
    return None


def runtime_report() -> str:
    """What the sync runtime's threads are doing (for the message of a failed assertion).

    Pools with a thread or a queued job, the system clock's scheduler, every lease whose body
    runs, and the stacks of the runtime's threads.
    """
    lines = [
        f"pool {pool.name}: threads={pool.threads} idle={pool._idle} busy={pool._busy} queued={len(pool._jobs)}"
        for pool in all_pools()
        if pool.threads or pool._jobs
    ]
    now = time.monotonic()
    for _provider, scheduler in _STRONG_SCHEDULERS.values():  # the system clock's scheduler
        heap = scheduler._heap
        timer = scheduler._timer
        lines.append(
            f"scheduler: entries={len(heap)} stale={scheduler.stale} first_due_in={heap[0][0] - now if heap else None}"
            f" armed_in={scheduler._armed_at - now} timer={'none' if timer is None else 'cancelled' if timer.cancelled else 'pending'}"
            f" timer_due_in={getattr(timer, 'when', now) - now}"
        )
    for lease in list(_LIVE.values())[:20]:  # leases whose body runs
        machine = lease._machine
        in_heap = any(entry[3] is lease for entry in lease._scheduler._heap)
        lines.append(
            f"lease {lease.key!r}: deadline_in={machine.deadline - now} armed_in={machine.armed_at - now}"
            f" queued_in={lease._queued - now} renew_in={None if machine.renew_at is None else machine.renew_at - now}"
            f" in_flight={machine.in_flight} lost={machine.lost} ended={machine.ended} own_entry={in_heap}"
        )
    frames = sys._current_frames()
    for thread in threading.enumerate():
        if thread.name.startswith("resilience") and thread.ident in frames:
            stack = "".join(traceback.format_stack(frames[thread.ident])[-4:])
            lines.append(f"--- {thread.name}\n{stack}")
    return "\n".join(lines)
