"""Sync hedging never waits for a pool thread: nested hedging and a saturated pool stay live.

Real clock, real threads, the process's one hedging pool (16 threads). A caller whose own
attempts have ended runs its hedged attempts still queued in the pool itself, or withdraws
them when its signal aborted: it only ever waits for attempts a thread is running.
"""

from __future__ import annotations

import asyncio
import sys
import threading
import time

import pytest

from resilience import ResiliencePipelineBuilder, TimeoutRejectedError, get_context
from resilience.strategies.hedging._pool import POOL, POOL_SIZE

REAL_WAIT = 20.0  # an upper bound on real waits: reached only if the code under test is wrong


def _cooperative(seconds: float) -> str:
    """A slow attempt that stops when its signal aborts (as a cooperative sync callable does)."""
    context = get_context()
    assert context is not None
    context.signal.wait(seconds)
    context.signal.raise_if_aborted()
    return f"attempt {context.attempt}"


@pytest.mark.timeout(120)
def test_32_concurrent_nested_hedged_executions_finish() -> None:
    """Each execution's hedged attempt runs another hedged pipeline: every one of them returns.

    The inner attempt 0 is slow and hedged after 20 ms; the outer attempt 0 wins after 50 ms,
    so the inner executions (on pool threads) are aborted while their own hedges are queued
    behind the other 15 pool threads doing the same.
    """
    inner = ResiliencePipelineBuilder().add_hedging(delay=0.02).build()
    outer = ResiliencePipelineBuilder().add_hedging(delay=0.01).build()

    def nested() -> str:
        context = get_context()
        assert context is not None
        if context.attempt == 0:
            time.sleep(0.05)  # not cooperative: wins after 50 ms whatever happens
            return "outer"
        return inner.execute(lambda: _cooperative(REAL_WAIT))

    results: list[str] = []
    failures: list[BaseException] = []
    lock = threading.Lock()
    start = threading.Barrier(32)

    def caller() -> None:
        start.wait(REAL_WAIT)
        try:
            answer = outer.execute(nested)
        except BaseException as exc:  # reported below
            with lock:
                failures.append(exc)
            return
        with lock:
            results.append(answer)

    began = time.monotonic()
    threads = [threading.Thread(target=caller, daemon=True) for _ in range(32)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(REAL_WAIT)
    took = time.monotonic() - began
    print(f"32 nested hedged executions finished in {took:.3f}s")  # noqa: T201 - the measure, with -s
    assert not any(thread.is_alive() for thread in threads), "nested hedged executions deadlocked"
    assert failures == []
    assert results == ["outer"] * 32
    assert took < 10, f"32 nested hedged executions took {took:.1f}s"


@pytest.mark.timeout(120)
def test_a_timeout_around_a_hedged_call_returns_on_time_with_the_pool_saturated() -> None:
    """`add_timeout(0.3)` outside hedging: the queued hedge is withdrawn, not waited for."""
    release = threading.Event()
    busy = threading.Semaphore(0)

    def occupy() -> None:
        busy.release()
        release.wait(REAL_WAIT)

    for _ in range(POOL_SIZE):  # unrelated hedged work holds every pool thread for seconds
        POOL.submit(occupy)
    for _ in range(POOL_SIZE):
        assert busy.acquire(timeout=REAL_WAIT)
    pipeline = ResiliencePipelineBuilder().add_timeout(0.3).add_hedging(delay=0.05).build()
    try:
        started = time.monotonic()
        with pytest.raises(TimeoutRejectedError):
            pipeline.execute(lambda: _cooperative(REAL_WAIT))
        took = time.monotonic() - started
    finally:
        release.set()
    print(f"add_timeout(0.3) around a hedged call returned after {took:.3f}s")  # noqa: T201 - the measure, with -s
    assert took < 1.0, f"the hedged execution returned {took:.2f}s after it started"


def _answers(execution: int, attempts: int) -> dict[int, str | ValueError]:
    """What each attempt of `execution` ends with: a value, or a handled `ValueError`.

    Every fifth execution fails on every attempt (its answer is attempt 0's error); in the
    others one attempt in three fails, so at least two return.
    """
    return {
        attempt: ValueError(f"{execution}:{attempt}")
        if execution % 5 == 0 or (execution + attempt) % 3 == 0
        else f"{execution}:{attempt}"
        for attempt in range(attempts)
    }


def _check(execution: int, answers: dict[int, str | ValueError], got: object) -> None:
    values = {answer for answer in answers.values() if isinstance(answer, str)}
    if values:
        assert got in values, f"execution {execution} answered {got!r}, not one of its attempts' values"
    else:  # every attempt handled: the original attempt's error
        assert isinstance(got, ValueError)
        assert str(got) == f"{execution}:0"


@pytest.mark.timeout(120)
def test_attempts_that_end_together_always_wake_their_caller_with_its_own_answer() -> None:
    """8 threads of 150 hedged executions each, every attempt started at once and ending at once.

    The caller's wake-up and the check after each attempt's end read the run's state without
    its lock (`_Run.after_change`, `_SyncRun.wake`): here the three attempts of each execution
    race to end on the caller's thread and two pool threads, while seven other callers do the
    same, with threads switching every few bytecodes. No caller may hang, and each gets an
    answer of its own execution. (Clearing the waiter outside the lock, a lost wake-up, hangs
    it in most runs.)
    """
    pipeline = ResiliencePipelineBuilder().add_hedging(max_hedged_attempts=2, delay=0, handle=ValueError).build()
    plans = {n: _answers(n, 3) for n in range(8 * 150)}

    def attempt(execution: int) -> str:
        context = get_context()
        assert context is not None
        answer = plans[execution][context.attempt]
        if isinstance(answer, ValueError):
            raise answer
        return answer

    failures: list[BaseException] = []
    lock = threading.Lock()
    start = threading.Barrier(8)

    def caller(first: int) -> None:
        start.wait(REAL_WAIT)
        try:
            for execution in range(first, first + 150):
                outcome = pipeline.settle(attempt, execution)
                _check(execution, plans[execution], outcome.value if outcome.is_ok else outcome.error)
        except BaseException as exc:  # reported below
            with lock:
                failures.append(exc)

    threads = [threading.Thread(target=caller, args=(150 * n,), daemon=True) for n in range(8)]
    switching = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # threads switch every few bytecodes: races show within a run
    try:
        for thread in threads:
            thread.start()
        deadline = time.monotonic() + 60
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))
    finally:
        sys.setswitchinterval(switching)
    assert not any(thread.is_alive() for thread in threads), "a hedged execution never woke its caller"
    assert failures == []


@pytest.mark.timeout(120)
async def test_async_attempts_that_end_together_always_wake_their_caller_with_its_own_answer() -> None:
    """The same with 400 concurrent async executions on one loop: every one ends, with its own answer."""
    pipeline = ResiliencePipelineBuilder().add_hedging(max_hedged_attempts=2, delay=0, handle=ValueError).build()
    plans = {n: _answers(n, 3) for n in range(400)}

    async def attempt(execution: int) -> str:
        context = get_context()
        assert context is not None
        await asyncio.sleep(0)  # the attempts interleave on the loop
        answer = plans[execution][context.attempt]
        if isinstance(answer, ValueError):
            raise answer
        return answer

    outcomes = await asyncio.wait_for(
        asyncio.gather(*(pipeline.settle_async(attempt, n) for n in range(400))), timeout=60
    )
    for execution, outcome in enumerate(outcomes):
        _check(execution, plans[execution], outcome.value if outcome.is_ok else outcome.error)
