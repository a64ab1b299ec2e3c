"""The in-process concurrency limiter: permits per key, the FIFO queue, waiting, rejection."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import signal as signal_module
import threading
import time
from typing import Any

import pytest

from resilience import (
    OperationAbortedError,
    RateLimiterRejectedError,
    ResiliencePipelineBuilder,
    Signal,
    ValidationError,
    is_rejection,
    use_context,
)
from resilience.strategies import (
    ConcurrencyLimiterStrategyOptions,
    OnRateLimiterRejectedArguments,
    concurrency_limiter_strategy,
)
from resilience.strategies.limiting._permits import LocalPermits
from resilience.testing import FakeTimeProvider, capture_events
from tests.threads_support import race


def _problems(limit: object = 2, **options: object) -> list[str]:
    with pytest.raises(ValidationError) as caught:
        ResiliencePipelineBuilder().add_concurrency_limiter(limit, **options).build()  # type: ignore[arg-type]
    return caught.value.problems


def _until(predicate: Any, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "not reached in time"
        time.sleep(0.005)


def test_factory_records_and_defaults() -> None:
    """concurrency_limiter_strategy() only records; the documented defaults; frozen."""
    options = concurrency_limiter_strategy(3)
    assert isinstance(options, ConcurrencyLimiterStrategyOptions)
    assert (options.limit, options.key, options.store, options.ttl, options.wait, options.queue) == (
        3,
        "",
        None,
        30.0,
        0.0,
        0,
    )
    assert (options.on_rejected, options.name) == (None, "ConcurrencyLimiter")
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.limit = 1  # type: ignore[misc]


@pytest.mark.parametrize(
    ("limit", "options", "problem"),
    [
        (0, {}, "ConcurrencyLimiter.limit: must be >= 1"),
        ("2", {}, "ConcurrencyLimiter.limit: must be an int"),
        (2, {"key": 1}, "ConcurrencyLimiter.key: must be a str or a callable"),
        (2, {"queue": -1}, "ConcurrencyLimiter.queue: must be >= 0"),
        (2, {"queue": 3}, "ConcurrencyLimiter.queue: queued callers wait up to `wait`"),
        (2, {"wait": 1}, "ConcurrencyLimiter.wait: an in-process limiter's callers wait in its queue"),
        (2, {"wait": -1, "queue": 1}, "ConcurrencyLimiter.wait: must be >= 0"),
        (2, {"ttl": 0}, "ConcurrencyLimiter.ttl: must be >= 0.001"),
        (2, {"on_rejected": 5}, "ConcurrencyLimiter.on_rejected: must be callable"),
    ],
)
def test_each_bad_option_is_named(limit: object, options: dict[str, Any], problem: str) -> None:
    """build() names every bad option."""
    problems = _problems(limit, **options)
    assert any(p.startswith(problem) for p in problems), problems


def test_limit_at_once_then_reject() -> None:
    """Two permits: a third concurrent execution is rejected at once, the callable never runs."""
    pipeline = ResiliencePipelineBuilder().add_concurrency_limiter(2, key="jobs").build()
    inside = threading.Barrier(3)
    leave = threading.Event()

    def hold() -> None:
        inside.wait(10)
        leave.wait(10)

    threads = [threading.Thread(target=pipeline.execute, args=(hold,)) for _ in range(2)]
    for thread in threads:
        thread.start()
    inside.wait(10)
    ran: list[int] = []
    with capture_events() as events, pytest.raises(RateLimiterRejectedError) as caught:
        pipeline.execute(lambda: ran.append(1))
    assert (caught.value.key, caught.value.retry_after) == ("jobs", None)
    assert is_rejection(caught.value)
    assert ran == []
    assert [e.name for e in events if e.name == "OnRateLimiterRejected"] == ["OnRateLimiterRejected"]
    leave.set()
    for thread in threads:
        thread.join(10)
    assert pipeline.execute(lambda: "free again") == "free again"
    assert len(pipeline.strategies[0]._permits) == 0  # nothing kept for an idle key


def test_a_constant_key_without_queue_never_admits_more_than_the_limit() -> None:
    """Permits taken and given back without a lock, from 8 threads switching as often as they can: never over the limit."""
    pipeline = ResiliencePipelineBuilder().add_concurrency_limiter(3).build()
    permits: LocalPermits = pipeline.strategies[0]._permits
    inside = [0]
    most = [0]
    counted = threading.Lock()
    admitted = [0]

    def body() -> None:
        with counted:
            inside[0] += 1
            most[0] = max(most[0], inside[0])
            admitted[0] += 1
        time.sleep(0)  # let the others in
        with counted:
            inside[0] -= 1

    def worker() -> None:
        for _ in range(500):
            with contextlib.suppress(RateLimiterRejectedError):
                pipeline.execute(body)

    race(worker)
    assert 1 <= most[0] <= 3
    assert admitted[0] >= 500
    assert (permits.in_use(), len(permits)) == (0, 0)


def test_permits_held_before_a_key_has_its_pool_are_counted_in_it() -> None:
    """A constant key's pool, made while `try_acquire` holds permits of that key (a reload that changes the key), starts with what is left."""
    permits = LocalPermits(2, 0, FakeTimeProvider())
    assert permits.try_acquire("k")  # held through the partition
    pool = permits.pool("k")
    assert pool is not None
    assert len(pool) == 1
    assert (permits.in_use(), len(permits)) == (1, 1)
    assert permits.try_acquire("k")  # the partition path takes from the pool now
    assert not permits.try_acquire("k")
    assert not pool
    permits.release("k")
    permits.release("k")  # both go back to the pool, the one held before it too
    assert (len(pool), permits.in_use(), len(permits)) == (2, 0, 0)
    assert LocalPermits(2, 1, FakeTimeProvider()).pool("k") is None  # a queue needs the partitions


def test_keys_are_separate_and_a_failure_releases() -> None:
    """Each key has its own permits; a callable that raises gives its permit back."""
    pipeline = ResiliencePipelineBuilder().add_concurrency_limiter(1, key=lambda ctx: ctx.operation_key or "").build()

    def nested() -> str:
        with use_context(operation_key="b"):
            return pipeline.execute(lambda: "b ran while a held")

    with use_context(operation_key="a"):
        assert pipeline.execute(nested) == "b ran while a held"
        with pytest.raises(ZeroDivisionError):
            pipeline.execute(lambda: 1 / 0)
        assert pipeline.execute(lambda: "a again") == "a again"


def test_queue_admits_in_fifo_order() -> None:
    """With one permit and a queue of 3, waiters run in the order they arrived; a fourth is rejected."""
    pipeline = ResiliencePipelineBuilder().add_concurrency_limiter(1, queue=3, wait=30).build()
    permits: LocalPermits = pipeline.strategies[0]._permits
    release_holder = threading.Event()
    order: list[int] = []
    holder = threading.Thread(target=pipeline.execute, args=(lambda: release_holder.wait(10),))
    holder.start()
    _until(lambda: permits._partitions.get("") is not None)
    waiters = []
    for index in range(3):
        thread = threading.Thread(target=pipeline.execute, args=(lambda index=index: order.append(index),))
        thread.start()
        waiters.append(thread)
        _until(lambda index=index: len(permits._partitions[""].waiters) == index + 1)
    with pytest.raises(RateLimiterRejectedError):
        pipeline.execute(lambda: order.append(99))
    release_holder.set()
    for thread in [holder, *waiters]:
        thread.join(10)
    assert order == [0, 1, 2]


def test_a_newcomer_never_overtakes_the_queue() -> None:
    """While someone waits, a permit freed is handed to them, not to a newcomer (no barging)."""
    permits = LocalPermits(1, 5, FakeTimeProvider())
    assert permits.try_acquire("k")
    results: list[bool | None] = []
    waiter = threading.Thread(target=lambda: results.append(permits.acquire("k", 60, Signal())))
    waiter.start()
    _until(lambda: len(permits._partitions["k"].waiters) == 1)
    permits.release("k")
    assert not permits.try_acquire("k")  # the waiter owns it now
    waiter.join(10)
    assert results == [True]
    permits.release("k")
    assert len(permits) == 0


def test_a_forgotten_partition_reused_by_another_key_starts_empty() -> None:
    """An idle key's partition serves the next key that starts: its count and queue start at zero."""
    permits = LocalPermits(2, 1, FakeTimeProvider())
    assert permits.try_acquire("a")
    permits.release("a")  # "a" is forgotten; its partition waits for the next key
    assert len(permits) == 0
    assert permits.try_acquire("b")
    assert permits.try_acquire("b")
    assert not permits.try_acquire("b")  # "b" has its own two permits, no more
    assert permits.try_acquire("a")  # and "a" a fresh partition of its own
    assert permits._partitions["a"] is not permits._partitions["b"]
    assert (permits.in_use(), permits.queued(), len(permits)) == (3, 0, 2)
    for key in ("a", "b", "b"):
        permits.release(key)
    assert (permits.in_use(), len(permits)) == (0, 0)


def test_the_wait_runs_out_on_the_time_provider() -> None:
    """A queued caller is rejected when `wait` passes on the pipeline's clock."""
    clock = FakeTimeProvider()
    pipeline = ResiliencePipelineBuilder(time_provider=clock).add_concurrency_limiter(1, queue=1, wait=5).build()
    permits: LocalPermits = pipeline.strategies[0]._permits
    leave = threading.Event()
    holder = threading.Thread(target=pipeline.execute, args=(lambda: leave.wait(10),))
    holder.start()
    _until(lambda: permits._partitions.get("") is not None)
    failures: list[BaseException] = []

    def queued() -> None:
        try:
            pipeline.execute(lambda: None)
        except BaseException as exc:
            failures.append(exc)

    waiter = threading.Thread(target=queued)
    waiter.start()
    _until(lambda: clock.pending_timers == 1)
    clock.advance(4.9)
    assert waiter.is_alive()
    clock.advance(0.1)
    waiter.join(10)
    assert len(failures) == 1
    assert isinstance(failures[0], RateLimiterRejectedError)
    assert len(permits._partitions[""].waiters) == 0
    leave.set()
    holder.join(10)
    assert len(permits) == 0


def test_an_aborted_signal_ends_the_wait_with_its_reason() -> None:
    """The caller's abort ends the wait at once, with the signal's reason; the queue is left."""
    pipeline = ResiliencePipelineBuilder().add_concurrency_limiter(1, queue=1, wait=60).build()
    permits: LocalPermits = pipeline.strategies[0]._permits
    leave = threading.Event()
    holder = threading.Thread(target=pipeline.execute, args=(lambda: leave.wait(10),))
    holder.start()
    _until(lambda: permits._partitions.get("") is not None)
    signal = Signal()
    failures: list[BaseException] = []

    def queued() -> None:
        with use_context(signal=signal):
            try:
                pipeline.execute(lambda: None)
            except BaseException as exc:
                failures.append(exc)

    waiter = threading.Thread(target=queued)
    waiter.start()
    _until(lambda: len(permits._partitions[""].waiters) == 1)
    signal.abort()
    waiter.join(10)
    assert len(failures) == 1
    assert isinstance(failures[0], OperationAbortedError)
    leave.set()
    holder.join(10)
    assert len(permits) == 0


class JobTimeout(Exception):
    """What a job runner's SIGALRM handler raises to stop a job that runs too long."""


def _raise_job_timeout(_signum: int, _frame: object) -> None:
    raise JobTimeout


@pytest.mark.skipif(not hasattr(signal_module, "setitimer"), reason="SIGALRM needs a POSIX system")
@pytest.mark.timeout(30)
def test_a_sync_waiter_interrupted_by_a_signal_handler_leaves_the_queue() -> None:
    """A real SIGALRM whose handler raises interrupts a queued caller: it leaves, the key stays usable."""
    pipeline = ResiliencePipelineBuilder().add_concurrency_limiter(1, queue=1, wait=10).build()
    permits: LocalPermits = pipeline.strategies[0]._permits
    leave = threading.Event()
    holder = threading.Thread(target=pipeline.execute, args=(lambda: leave.wait(10),))
    holder.start()
    _until(lambda: permits.in_use() == 1)
    previous = signal_module.signal(signal_module.SIGALRM, _raise_job_timeout)
    try:
        signal_module.setitimer(signal_module.ITIMER_REAL, 0.1)
        with pytest.raises(JobTimeout):
            pipeline.execute(lambda: "never")  # queued in the main thread, interrupted there
    finally:
        signal_module.setitimer(signal_module.ITIMER_REAL, 0)
        signal_module.signal(signal_module.SIGALRM, previous)
    assert permits.queued() == 0, "the interrupted caller stayed in the queue"
    leave.set()
    holder.join(10)
    assert permits.in_use() == 0  # the released permit went to no ghost
    assert pipeline.execute(lambda: "next") == "next"
    assert len(permits) == 0


def test_a_sync_waiter_interrupted_after_its_grant_hands_the_permit_on() -> None:
    """Granted in the instant an exception interrupts the wait: the permit goes back."""
    permits = LocalPermits(1, 2, FakeTimeProvider())
    assert permits.try_acquire("k")

    class Interrupted(BaseException):
        pass

    class GrantThenInterrupt(Signal):
        """A signal whose wake-up registration grants the permit, then raises (an interrupt)."""

        def add_wakeup(self, wakeup: Any) -> Any:
            permits.release("k")  # granted to the queued waiter
            raise Interrupted

    with pytest.raises(Interrupted):
        permits.acquire("k", 60, GrantThenInterrupt())
    assert len(permits) == 0


def test_a_permit_granted_to_an_aborted_waiter_is_handed_on() -> None:
    """Granted and aborted in the same instant: the permit goes back (to the next in line)."""
    permits = LocalPermits(1, 2, FakeTimeProvider())
    assert permits.try_acquire("k")
    signal = Signal()
    signal.abort()
    waiter = permits._enqueue("k", lambda: None)
    assert waiter is not None
    permits.release("k")  # granted to the waiter
    assert permits._leave("k", waiter) is True
    permits.release("k")
    assert len(permits) == 0
    with pytest.raises(OperationAbortedError):
        permits.acquire("k", 1, signal)  # free: granted at once, then handed back for the abort
    assert len(permits) == 0


def test_auto_advancing_clock_times_the_wait_out() -> None:
    """On an auto-advancing fake clock a queued caller's wait passes at once (nothing else moves it)."""
    clock = FakeTimeProvider(auto_advance=True)
    permits = LocalPermits(1, 1, clock)
    assert permits.try_acquire("k")
    assert permits.acquire("k", 3, Signal()) is False
    assert clock.monotonic() == 3
    assert permits.acquire("other", 3, Signal()) is True


def test_on_rejected_gets_the_key() -> None:
    """on_rejected receives the context, the key and no retry_after."""
    received: list[OnRateLimiterRejectedArguments] = []
    pipeline = ResiliencePipelineBuilder().add_concurrency_limiter(1, key="k", on_rejected=received.append).build()

    def inner() -> None:
        with pytest.raises(RateLimiterRejectedError):
            pipeline.execute(lambda: None)

    pipeline.execute(inner)
    assert [(r.key, r.retry_after) for r in received] == [("k", None)]
    assert "limit=1" in repr(pipeline.strategies[0])


# -- async --------------------------------------------------------------------------------------


async def test_async_limit_queue_and_order() -> None:
    """Tasks: one permit, a queue of 2 served in order, a third waiter rejected."""
    received: list[OnRateLimiterRejectedArguments] = []

    async def on_rejected(args: OnRateLimiterRejectedArguments) -> None:
        received.append(args)

    pipeline = ResiliencePipelineBuilder().add_concurrency_limiter(1, queue=2, wait=30, on_rejected=on_rejected).build()
    gate = asyncio.Event()
    order: list[str] = []

    async def hold() -> None:
        await gate.wait()
        order.append("holder")

    async def mark(name: str) -> None:
        order.append(name)

    holder = asyncio.ensure_future(pipeline.execute_async(hold))
    await asyncio.sleep(0.01)
    first = asyncio.ensure_future(pipeline.execute_async(mark, "first"))
    await asyncio.sleep(0.01)
    second = asyncio.ensure_future(pipeline.execute_async(mark, "second"))
    await asyncio.sleep(0.01)
    with pytest.raises(RateLimiterRejectedError):
        await pipeline.execute_async(mark, "third")
    assert len(received) == 1
    gate.set()
    await asyncio.wait_for(asyncio.gather(holder, first, second), 10)
    assert order == ["holder", "first", "second"]
    assert len(pipeline.strategies[0]._permits) == 0


async def test_async_cancelled_waiter_leaves_the_queue() -> None:
    """A waiting task that is cancelled leaves the queue; the next permit goes to who is left."""
    pipeline = ResiliencePipelineBuilder().add_concurrency_limiter(1, queue=2, wait=30).build()
    permits: LocalPermits = pipeline.strategies[0]._permits
    gate = asyncio.Event()
    holder = asyncio.ensure_future(pipeline.execute_async(gate.wait))
    await asyncio.sleep(0.01)

    async def done() -> str:
        return "ran"

    doomed = asyncio.ensure_future(pipeline.execute_async(done))
    await asyncio.sleep(0.01)
    survivor = asyncio.ensure_future(pipeline.execute_async(done))
    await asyncio.sleep(0.01)
    doomed.cancel()
    with pytest.raises(asyncio.CancelledError):
        await doomed
    assert len(permits._partitions[""].waiters) == 1
    gate.set()
    assert await asyncio.wait_for(survivor, 10) == "ran"
    await holder
    assert len(permits) == 0


async def test_async_cancelled_after_grant_hands_the_permit_on() -> None:
    """A waiter granted the permit but cancelled before it ran gives it back."""
    permits = LocalPermits(1, 2, FakeTimeProvider())
    assert permits.try_acquire("k")
    task = asyncio.ensure_future(permits.acquire_async("k", 60, Signal()))
    await asyncio.sleep(0.01)
    permits.release("k")  # granted; the wake-up is queued on the loop
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert len(permits) == 0


async def test_async_wait_times_out_and_abort() -> None:
    """The async wait ends when `wait` passes (rejected) or the signal aborts (its reason)."""
    clock = FakeTimeProvider()
    permits = LocalPermits(1, 2, clock)
    assert permits.try_acquire("k")
    waiting = asyncio.ensure_future(permits.acquire_async("k", 5, Signal()))
    await asyncio.sleep(0.01)
    clock.advance(5)
    assert await asyncio.wait_for(waiting, 10) is False
    signal = Signal()
    aborted = asyncio.ensure_future(permits.acquire_async("k", 5, signal))
    await asyncio.sleep(0.01)
    signal.abort()
    with pytest.raises(OperationAbortedError):
        await asyncio.wait_for(aborted, 10)
    auto = LocalPermits(1, 1, FakeTimeProvider(auto_advance=True))
    assert auto.try_acquire("k")
    assert await auto.acquire_async("k", 2, Signal()) is False
    full = LocalPermits(1, 0, clock)
    assert full.try_acquire("k")
    assert await full.acquire_async("k", 2, Signal()) is None
    permits.release("k")
    assert await permits.acquire_async("k", 1, Signal()) is True
