"""The async timeout's deadlines: one queue and one timer per strategy, each deadline firing on time."""

from __future__ import annotations

import asyncio
import os
import sys
import threading
import time
import warnings
from typing import TYPE_CHECKING, Any

import pytest

from resilience import ResiliencePipelineBuilder, Signal, TimeoutRejectedError, get_context, use_context

if TYPE_CHECKING:
    from resilience import ResiliencePipeline
    from resilience.strategies.timeout._strategy import _Deadlines
    from resilience.testing import FakeTimeProvider


def queue_of(pipeline: ResiliencePipeline) -> _Deadlines:
    return pipeline.strategies[0]._deadlines  # type: ignore[attr-defined,no-any-return]


async def test_deadlines_started_apart_each_fire_at_their_own_time(clock: FakeTimeProvider) -> None:
    """Executions started one second apart time out one second apart; one that succeeds never does."""
    pipeline = ResiliencePipelineBuilder(time_provider=clock).add_timeout(10.0).build()
    ended: dict[int, float] = {}

    async def run(n: int) -> None:
        async def hangs() -> None:
            if n == 2:
                await clock.sleep_async(3.5)  # the third succeeds halfway through its timeout
                return
            await asyncio.Event().wait()

        try:
            await pipeline.execute_async(hangs)
        except TimeoutRejectedError:
            ended[n] = clock.monotonic()
        else:
            ended[n] = -clock.monotonic()

    tasks = []
    for n in range(5):
        tasks.append(asyncio.ensure_future(run(n)))
        await asyncio.sleep(0)
        clock.advance(1.0)  # started at 0, 1, 2, 3, 4: due at 10, 11, 12, 13, 14
    for _ in range(20):
        await asyncio.sleep(0)
        clock.advance(0.5)
    await asyncio.gather(*tasks)
    assert ended == {0: 10.0, 1: 11.0, 2: -6.0, 3: 13.0, 4: 14.0}
    assert not queue_of(pipeline).pending
    assert clock.pending_timers == 0  # the timer stopped once nothing was left


async def test_a_finished_execution_leaves_no_deadline_behind(clock: FakeTimeProvider) -> None:
    """Successes behind a running execution leave at most a sweep's worth of done deadlines, and
    one timer serves them all."""
    pipeline = ResiliencePipelineBuilder(time_provider=clock).add_timeout(5.0).build()
    release = asyncio.Event()

    async def slow() -> str:
        await release.wait()
        return "slow"

    async def quick() -> str:
        return "quick"

    first = asyncio.ensure_future(pipeline.execute_async(slow))
    await asyncio.sleep(0)
    for _ in range(1000):
        assert await pipeline.execute_async(quick) == "quick"
    queue = queue_of(pipeline)
    assert queue.pending[0].signal is not None
    assert not queue.pending[0].done  # the running one heads the queue
    assert 1 <= len(queue.pending) <= 70  # done deadlines behind it are swept, not kept by the thousand
    assert clock.pending_timers == 1
    release.set()
    assert await first == "slow"
    assert all(queued.done for queued in queue.pending)  # nothing left to fire
    clock.advance(5.0)  # the timer left armed by the successes fires, finds nothing due, stops
    assert clock.pending_timers == 0
    assert not queue.pending
    assert await pipeline.execute_async(quick) == "quick"  # and a new execution arms it again
    assert clock.pending_timers == 1


async def test_an_execution_after_the_timer_stopped_still_times_out(clock: FakeTimeProvider) -> None:
    """The queue emptied and its timer stopped: the next execution arms a new one."""
    pipeline = ResiliencePipelineBuilder(time_provider=clock).add_timeout(2.0).build()

    async def quick() -> None:
        return None

    await pipeline.execute_async(quick)
    clock.advance(2.0)
    assert clock.pending_timers == 0
    execution = asyncio.ensure_future(pipeline.execute_async(asyncio.Event().wait))
    await asyncio.sleep(0)
    clock.advance(2.0)
    with pytest.raises(TimeoutRejectedError):
        await execution


def test_executions_on_two_event_loops_time_out_on_the_real_clock() -> None:
    """One strategy, two threads with a loop each: each deadline fires, its callbacks on its own loop."""
    pipeline = ResiliencePipelineBuilder().add_timeout(0.2).build()
    results: dict[str, Any] = {}

    def run(name: str) -> None:
        async def hangs() -> None:
            context = get_context()
            assert context is not None
            context.signal.add_callback(lambda _: results.setdefault(f"{name} callback", threading.get_ident()))
            results[f"{name} loop"] = threading.get_ident()
            await asyncio.sleep(10)

        async def main() -> None:
            for _ in range(50):
                await pipeline.execute_async(asyncio.sleep, 0)
            started = time.monotonic()
            try:
                await pipeline.execute_async(hangs)
            except TimeoutRejectedError:
                results[name] = time.monotonic() - started
                results[f"{name} ran first"] = f"{name} callback" in results  # before the execution ended

        asyncio.run(main())

    threads = [threading.Thread(target=run, args=(name,)) for name in ("a", "b")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    for name in ("a", "b"):
        assert 0.15 < results[name] < 5.0, results
        assert results[f"{name} callback"] == results[f"{name} loop"]  # user code on the loop's thread
        assert results[f"{name} ran first"]
    assert not queue_of(pipeline).pending


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
@pytest.mark.timeout(30)
def test_a_forked_child_arms_its_own_timer() -> None:
    """The parent's timer is armed at fork time; the child's timeouts still fire."""
    pipeline = ResiliencePipelineBuilder().add_timeout(0.3).build()

    async def quick() -> None:
        return None

    asyncio.run(pipeline.execute_async(quick))  # the timer is armed and stays so for 0.3 s
    assert queue_of(pipeline)._alarm is not None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # Python 3.12+: fork with threads
        pid = os.fork()
    if pid == 0:  # pragma: no cover - the child reports through its exit code
        ok = False
        try:

            async def child() -> None:
                with pytest.raises(TimeoutRejectedError):
                    await pipeline.execute_async(asyncio.sleep, 3.0)

            started = time.monotonic()
            asyncio.run(child())
            ok = time.monotonic() - started < 2.5
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


async def test_an_execution_leaves_nothing_in_the_callers_signal(clock: FakeTimeProvider) -> None:
    """The child is adopted on entry and detached at the end: the caller's signal keeps no callback."""
    pipeline = ResiliencePipelineBuilder(time_provider=clock).add_timeout(5.0).build()
    caller = Signal()
    seen: list[Signal] = []

    async def body() -> None:
        context = get_context()
        assert context is not None
        seen.append(context.signal)
        assert caller._callbacks == {context.signal: context.signal.abort}  # adopted while it runs

    async def fails() -> None:
        await body()
        raise ConnectionError

    with use_context(signal=caller):
        await pipeline.execute_async(body)
        with pytest.raises(ConnectionError):
            await pipeline.execute_async(fails)
    assert not caller._callbacks
    assert all(child._parent is None and not child._callbacks for child in seen)
    caller.abort()
    assert not any(child.aborted for child in seen)  # detached: the caller's abort no longer reaches them


async def test_executions_ending_out_of_order_time_out_at_their_own_deadlines(clock: FakeTimeProvider) -> None:
    """Many executions at once, ending in no particular order: each that outlives its deadline
    times out, each that ends first does not, and nothing stays queued."""
    pipeline = ResiliencePipelineBuilder(time_provider=clock).add_timeout(10.0).build()
    gates = [asyncio.Event() for _ in range(200)]

    async def wait(gate: asyncio.Event) -> str:
        await gate.wait()
        return "done"

    executions = []
    for gate in gates:
        executions.append(asyncio.ensure_future(pipeline.execute_async(wait, gate)))
        await asyncio.sleep(0)
        clock.advance(0.01)  # started 10 ms apart: due from 10.0 to 11.99
    for index in range(0, 200, 3):  # every third one ends, the latest first
        gates[198 - index].set()
    await asyncio.sleep(0)
    clock.advance(10.0)  # 12.0 since the first start: every other deadline passed
    outcomes = await asyncio.gather(*executions, return_exceptions=True)
    ended = {198 - index for index in range(0, 200, 3)}
    assert [index for index, outcome in enumerate(outcomes) if outcome == "done"] == sorted(ended)
    assert all(isinstance(outcomes[i], TimeoutRejectedError) for i in range(200) if i not in ended)
    assert not queue_of(pipeline).pending
