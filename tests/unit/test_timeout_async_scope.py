"""The async timeout under `Signal.cancel_scope()`: the cancellation cases a scope must get right."""

from __future__ import annotations

import asyncio
import threading

import pytest

from resilience import OperationAbortedError, ResiliencePipelineBuilder, Signal, get_context, use_context


async def test_an_aborted_caller_never_starts_the_callable() -> None:
    """Under an already aborted signal the async callable never runs; the reason is raised."""
    built = ResiliencePipelineBuilder().add_timeout(30.0).build()
    signal = Signal()
    reason = RuntimeError("stop")
    signal.abort(reason)
    ran: list[bool] = []

    async def body() -> None:
        ran.append(True)

    with use_context(signal=signal), pytest.raises(RuntimeError) as caught:
        await built.execute_async(body)
    assert caught.value is reason
    assert ran == []


async def test_an_abort_from_another_thread_cancels_the_callable() -> None:
    """The caller's signal aborted on another thread cancels the awaiting callable with its reason."""
    built = ResiliencePipelineBuilder().add_timeout(30.0).build()
    signal = Signal()
    started = threading.Event()

    async def body() -> None:
        started.set()
        await asyncio.sleep(10)

    def abort() -> None:
        started.wait(5)
        signal.abort()

    helper = threading.Thread(target=abort)
    helper.start()
    try:
        with use_context(signal=signal), pytest.raises(OperationAbortedError):
            await asyncio.wait_for(built.execute_async(body), 5)
    finally:
        helper.join(5)


async def test_an_abort_in_the_callables_own_step_is_absorbed_on_return() -> None:
    """The callable aborts its own signal and returns without awaiting: its result stands."""
    built = ResiliencePipelineBuilder().add_timeout(30.0).build()

    async def body() -> str:
        context = get_context()
        assert context is not None
        context.signal.abort()
        return "done"

    assert await built.execute_async(body) == "done"
    await asyncio.sleep(0)  # no cancellation leaked into this task


async def test_an_outer_cancellation_pending_at_return_still_cancels() -> None:
    """Our cancellation is absorbed, but one requested by someone else at the same time is not."""
    built = ResiliencePipelineBuilder().add_timeout(30.0).build()

    async def body() -> str:
        context = get_context()
        assert context is not None
        context.signal.abort()
        task = asyncio.current_task()
        assert task is not None
        task.cancel()  # the caller's own cancellation, on top of ours
        return "done"

    task = asyncio.ensure_future(built.execute_async(body))
    with pytest.raises(asyncio.CancelledError):
        await task


def test_a_late_abort_neither_cancels_nor_fails() -> None:
    """An abort after the scope ended, or from another thread once its loop closed, cancels nothing."""
    ended = Signal()

    async def leave_the_scope() -> None:
        async with ended.cancel_scope():
            pass
        assert not ended._callbacks  # the scope left nothing registered
        ended.abort()  # after the scope: nothing to cancel
        await asyncio.sleep(0)

    asyncio.run(leave_the_scope())

    other = Signal()
    loop = asyncio.new_event_loop()
    scope = other.cancel_scope()
    loop.run_until_complete(scope.__aenter__())  # entered, and never left: its loop closes
    loop.close()
    done = threading.Event()

    def abort() -> None:
        other.abort()  # another thread, a closed loop: the RuntimeError is swallowed
        done.set()

    threading.Thread(target=abort).start()
    assert done.wait(5)
    assert other.aborted


@pytest.mark.parametrize("kind", ["timeout", "hedging"])
async def test_an_abort_then_a_raise_in_the_same_step_leaves_no_stray_cancellation(kind: str) -> None:
    """The callable aborts its signal and raises without awaiting: its error stands, and the caller's next await runs."""
    builder = ResiliencePipelineBuilder()
    built = (
        builder.add_timeout(5.0) if kind == "timeout" else builder.add_hedging(max_hedged_attempts=1, delay=1.0)
    ).build()
    signal = Signal()

    async def body() -> None:
        signal.abort()
        raise ValueError("failed after aborting")

    with use_context(signal=signal), pytest.raises(ValueError, match="failed after aborting"):
        await built.execute_async(body)
    await asyncio.sleep(0)  # a cancellation left pending would be raised here
    task = asyncio.current_task()
    assert task is not None
    assert task.cancelling() == 0
