"""Sixteen user callbacks that never return stop none of the library's own wake-ups.

Real clock, real threads. Sixteen leases are lost and their `on_lock_lost` callbacks block,
holding every thread the callback pool starts at once. The library's wake-ups (a retry sleep
cut by a timeout, a body waiting on its signal, a lock wait, the abandon of a hedged HTTP
send, an async waiter on a sync lease's signal) run where the abort happens, never on that
pool; and a later lease's `on_lock_lost` still runs, on a spare thread.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import TYPE_CHECKING

import httpx
import pytest

from resilience import ResiliencePipelineBuilder, TimeoutRejectedError, get_context
from resilience._lease import LeaseParams, LockOps, acquire_lease
from resilience._lease._workers import CALLBACK_THREADS, CALLBACKS
from resilience._runtime._pool import Pool
from resilience.http import ResilientTransport, standard_hedging_pipeline
from resilience.stores import MemoryLockStore
from tests.http_support import Reply, serve

if TYPE_CHECKING:
    from collections.abc import Iterator

    from resilience._lease import Lease

TTL = 0.3
SLACK = 2.0  # what a loaded 2-core machine may add to a 0.2 s cut (1.01 s seen at load 9; the bug costs 3 s)


class AnsweringFalse(MemoryLockStore):
    """Every renewal answers False: each lease is lost at its first renewal (ttl/3)."""

    def renew(self, key: str, owner: str, ttl: float) -> bool:
        return False


def _acquire(store: MemoryLockStore, key: str, **params: object) -> Lease:
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


@pytest.fixture
def blocked() -> Iterator[None]:
    """Sixteen `on_lock_lost` callbacks blocked on as many threads of the callback pool."""
    store = AnsweringFalse()
    gate = threading.Event()
    entered = threading.Semaphore(0)

    def block(*_args: object) -> None:
        entered.release()
        gate.wait(60)

    leases = [_acquire(store, f"blocked-{n}", on_lost=block) for n in range(CALLBACK_THREADS)]
    try:
        for _ in leases:
            assert entered.acquire(timeout=10), "a loss callback never started"
        yield
    finally:
        gate.set()
        for lease in leases:
            lease.finish()
        assert CALLBACKS.wait_idle(10)


def _timed(call: object) -> float:
    started = time.monotonic()
    with pytest.raises(TimeoutRejectedError):
        call()  # type: ignore[operator]
    return time.monotonic() - started


@pytest.mark.timeout(60)
@pytest.mark.usefixtures("blocked")
def test_a_sync_timeout_still_cuts_a_retry_sleep() -> None:
    """`add_timeout(0.2)` around `add_retry(delay=3)`: the sleep ends at the deadline, not after 3 s."""
    pipeline = ResiliencePipelineBuilder().add_timeout(0.2).add_retry(delay=3, max_retries=1).build()

    def fails() -> None:
        raise ConnectionError

    took = _timed(lambda: pipeline.execute(fails))
    assert took < SLACK, f"the timeout cut the retry sleep after {took:.2f}s"


@pytest.mark.timeout(60)
@pytest.mark.usefixtures("blocked")
def test_a_body_waiting_on_its_signal_is_woken() -> None:
    """A cooperative body waiting on its signal under `add_timeout(0.2)` returns at the deadline."""
    pipeline = ResiliencePipelineBuilder().add_timeout(0.2).build()

    def waits() -> None:
        context = get_context()
        assert context is not None
        context.signal.wait(5)
        context.signal.raise_if_aborted()

    took = _timed(lambda: pipeline.execute(waits))
    assert took < SLACK, f"the body was woken after {took:.2f}s"


@pytest.mark.timeout(60)
@pytest.mark.usefixtures("blocked")
def test_a_lock_wait_is_cut_by_its_timeout() -> None:
    """`add_timeout(0.2)` around `add_lock(wait=3)` on a held key: the wait ends at the deadline."""
    store = MemoryLockStore()
    holder = ResiliencePipelineBuilder().add_lock("held", ttl=30, store=store).build()
    waiter = ResiliencePipelineBuilder().add_timeout(0.2).add_lock("held", ttl=30, wait=3, store=store).build()
    inside, leave = threading.Event(), threading.Event()

    def hold() -> None:
        inside.set()
        leave.wait(30)

    thread = threading.Thread(target=holder.execute, args=(hold,))
    thread.start()
    try:
        assert inside.wait(10)
        took = _timed(lambda: waiter.execute(lambda: None))
    finally:
        leave.set()
        thread.join(10)
    assert took < SLACK, f"the lock wait was cut after {took:.2f}s"


@pytest.mark.timeout(60)
@pytest.mark.usefixtures("blocked")
def test_a_hedged_http_send_is_abandoned_at_the_total_timeout() -> None:
    """A sync hedged request to a server that answers after 3 s: the total timeout of 0.3 s ends it."""
    for server in serve():
        url = server.script("/slow", default=Reply(delay=3))
        pipeline = standard_hedging_pipeline(total_timeout=0.3, attempt_timeout=10, hedging_delay=10)
        with httpx.Client(transport=ResilientTransport(pipeline)) as client:
            started = time.monotonic()
            with pytest.raises((TimeoutRejectedError, httpx.TimeoutException)):
                client.get(url)
            took = time.monotonic() - started
        assert took < SLACK + 0.1, f"the request ended after {took:.2f}s"


@pytest.mark.timeout(60)
@pytest.mark.usefixtures("blocked")
def test_an_async_waiter_on_a_sync_leases_signal_is_woken() -> None:
    """`await signal.wait_async()` on a sync lease lost on the timer thread: woken at the loss."""
    lease = _acquire(AnsweringFalse(), "watched")

    async def watch() -> bool:
        return await lease.signal.wait_async(5)

    started = time.monotonic()
    try:
        assert asyncio.run(watch())
    finally:
        lease.finish()
    took = time.monotonic() - started
    assert took < SLACK, f"the async waiter was woken after {took:.2f}s"


@pytest.mark.timeout(60)
@pytest.mark.usefixtures("blocked")
def test_a_later_leases_loss_callback_still_runs() -> None:
    """A 17th lease is lost: its `on_lock_lost` runs, on a spare thread."""
    told = threading.Event()
    lease = _acquire(AnsweringFalse(), "later", on_lost=lambda *_args: told.set())
    try:
        assert lease.signal.wait(5)
        assert told.wait(5), "the later lease's on_lock_lost never ran"
    finally:
        lease.finish()


def test_a_pool_past_its_eager_threads_adds_a_spare_after_its_stall(caplog: pytest.LogCaptureFixture) -> None:
    """Every eager thread blocked and a job waiting: one spare starts after `stall`, with a warning."""
    pool = Pool("spare-test", 3, 0.05, eager=2)
    gate, ran = threading.Event(), threading.Event()
    try:
        pool.submit(lambda: gate.wait(10))
        pool.submit(lambda: gate.wait(10))
        pool.submit(ran.set)
        assert ran.wait(5), "the waiting job never ran"
        assert pool.threads == 3
    finally:
        gate.set()
    assert pool.wait_idle(5)
    assert "every thread of spare-test is busy for 0.1 s and jobs wait: spare thread 3 of 3 started" in caplog.text
