"""Sync hedging never waits for a pool thread: nested hedging and a saturated pool stay live.

Real clock, real threads, the process's one hedging pool (16 threads). A caller whose own
attempts have ended runs its hedged attempts still queued in the pool itself, or withdraws
them when its signal aborted: it only ever waits for attempts a thread is running.
"""

from __future__ import annotations

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
