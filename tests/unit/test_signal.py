import asyncio
import logging
import threading
import time

import pytest

from resilience import OperationAbortedError, Signal, ValidationError


def test_a_new_signal_is_not_aborted() -> None:
    """A fresh signal has no reason and raise_if_aborted does nothing."""
    signal = Signal()
    assert not signal.aborted
    assert signal.reason is None
    signal.raise_if_aborted()
    assert "active" in repr(signal)


def test_abort_sets_the_reason_once() -> None:
    """abort() records the reason; a second abort changes nothing."""
    signal = Signal()
    first = ValueError("first")
    assert signal.abort(first) is True
    assert signal.abort(ValueError("second")) is False
    assert signal.reason is first
    with pytest.raises(ValueError, match="first"):
        signal.raise_if_aborted()


def test_default_reason_is_operation_aborted() -> None:
    """abort() without a reason uses a fresh OperationAbortedError."""
    signal = Signal()
    signal.abort()
    assert isinstance(signal.reason, OperationAbortedError)


def test_callbacks_run_once_with_the_reason_and_can_be_removed() -> None:
    """Callbacks run once on abort; a removed one never runs; late ones run at once."""
    signal = Signal()
    seen: list[object] = []
    signal.add_callback(lambda reason: seen.append(("a", reason)))
    remove_b = signal.add_callback(lambda reason: seen.append(("b", reason)))
    remove_b()
    remove_b()  # idempotent
    reason = RuntimeError("x")
    signal.abort(reason)
    signal.abort(reason)
    assert seen == [("a", reason)]
    remove_late = signal.add_callback(lambda r: seen.append(("late", r)))
    assert seen[-1] == ("late", reason)
    remove_late()


def test_a_failing_callback_is_logged_and_the_others_still_run(caplog: pytest.LogCaptureFixture) -> None:
    """An exception in a callback is logged, never raised from abort()."""
    signal = Signal()
    seen: list[str] = []

    def bad(_reason: BaseException) -> None:
        raise RuntimeError("callback failed")

    signal.add_callback(bad)
    signal.add_callback(lambda _r: seen.append("ran"))
    with caplog.at_level(logging.ERROR, logger="resilience"):
        signal.abort()
    assert seen == ["ran"]
    assert "a signal callback raised" in caplog.text
    with caplog.at_level(logging.ERROR, logger="resilience"):
        signal.add_callback(bad)
    assert caplog.text.count("a signal callback raised") == 2


def test_a_child_follows_its_parent_synchronously() -> None:
    """A child aborts with its parent's reason, at once; aborting a child leaves the parent alone."""
    parent = Signal()
    child = parent.child()
    grandchild = child.child()
    sibling = parent.child()
    sibling.abort(ValueError("only me"))
    assert not parent.aborted
    reason = KeyError("parent")
    parent.abort(reason)
    assert child.reason is reason
    assert grandchild.reason is reason
    assert isinstance(sibling.reason, ValueError)


def test_a_child_of_an_aborted_signal_is_born_aborted() -> None:
    """child() of an aborted signal is already aborted with the same reason."""
    parent = Signal()
    parent.abort()
    assert parent.child().reason is parent.reason


def test_a_detached_child_no_longer_follows() -> None:
    """detach() unhooks a child from its parent (no reference left behind)."""
    parent = Signal()
    child = parent.child()
    child.detach()
    child.detach()
    assert not parent._callbacks
    parent.abort()
    assert not child.aborted


def test_wait_returns_true_on_abort_from_another_thread() -> None:
    """wait() blocks until another thread aborts."""
    signal = Signal()
    timer = threading.Timer(0.01, signal.abort)
    timer.start()
    assert signal.wait(5) is True
    timer.join()
    assert signal.wait() is True


def test_wait_times_out() -> None:
    """wait(timeout) returns False when nothing aborts."""
    assert Signal().wait(0.01) is False


async def test_wait_async_wakes_on_abort_and_times_out() -> None:
    """wait_async() returns True on abort (from any thread) and False on timeout."""
    signal = Signal()
    assert await signal.wait_async(0.01) is False
    asyncio.get_running_loop().call_later(0.01, signal.abort)
    assert await signal.wait_async(5) is True
    assert await signal.wait_async() is True
    other = Signal()
    thread = threading.Thread(target=lambda: (time.sleep(0.01), other.abort()))
    thread.start()
    assert await other.wait_async() is True
    thread.join()


async def test_cancel_scope_turns_the_abort_into_the_reason() -> None:
    """An abort cancels the block; the scope raises the signal's reason instead."""
    signal = Signal()
    reason = TimeoutError("deadline")
    asyncio.get_running_loop().call_later(0.01, signal.abort, reason)
    with pytest.raises(TimeoutError) as info:
        async with signal.cancel_scope():
            await asyncio.sleep(10)
    assert info.value is reason
    task = asyncio.current_task()
    assert task is not None
    assert task.cancelling() == 0


async def test_cancel_scope_from_another_thread() -> None:
    """An abort on another thread cancels the task through the loop."""
    signal = Signal()
    thread = threading.Thread(target=lambda: (time.sleep(0.01), signal.abort(KeyError("t"))))
    thread.start()
    with pytest.raises(KeyError):
        async with signal.cancel_scope():
            await asyncio.sleep(10)
    thread.join()


async def test_cancel_scope_lets_outside_cancellation_through() -> None:
    """A cancellation that is not the signal's passes through unchanged."""
    signal = Signal()

    async def body() -> None:
        async with signal.cancel_scope():
            await asyncio.sleep(10)

    task = asyncio.create_task(body())
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_cancel_scope_both_cancelled_keeps_the_outer_cancellation() -> None:
    """If the caller also cancelled, the CancelledError wins over the reason."""
    signal = Signal()

    async def body() -> None:
        async with signal.cancel_scope():
            await asyncio.sleep(10)

    task = asyncio.create_task(body())
    await asyncio.sleep(0)
    task.cancel()
    signal.abort()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_cancel_scope_on_an_aborted_signal_raises_at_once() -> None:
    """Entering the scope of an aborted signal raises the reason before the block runs."""
    signal = Signal()
    signal.abort(ValueError("early"))
    ran = False
    with pytest.raises(ValueError, match="early"):
        async with signal.cancel_scope():
            ran = True
    assert not ran


async def test_cancel_scope_block_that_aborts_itself_and_returns() -> None:
    """A block that aborts its own signal and returns without awaiting returns normally."""
    signal = Signal()
    async with signal.cancel_scope():
        signal.abort()
    task = asyncio.current_task()
    assert task is not None
    assert task.cancelling() == 0
    await asyncio.sleep(0)  # no stray cancellation is left pending


async def test_cancel_scope_without_abort_is_transparent() -> None:
    """Without an abort the block's result and exceptions pass unchanged."""
    signal = Signal()
    async with signal.cancel_scope() as inside:
        assert inside is signal
    with pytest.raises(LookupError):
        async with signal.cancel_scope():
            raise LookupError


def test_abort_refuses_a_reason_that_is_not_an_exception() -> None:
    """abort('text') raises ValidationError and leaves the signal as it was."""
    from resilience import ValidationError

    signal = Signal()
    with pytest.raises(ValidationError, match="must be an exception"):
        signal.abort("gone")  # type: ignore[arg-type]
    assert not signal.aborted


async def test_wait_takes_any_duration() -> None:
    """wait and wait_async take a timedelta like every other duration."""
    import datetime as dt

    signal = Signal()
    assert signal.wait(dt.timedelta(milliseconds=5)) is False
    assert await signal.wait_async(dt.timedelta(milliseconds=5)) is False


def test_a_child_scope_watches_a_new_child_and_lets_it_go_at_the_end() -> None:
    """`child_scope()`: the parent's abort cancels the block with its reason; a child's own abort
    stays in the child; after the block the child no longer follows the parent."""
    children: list[Signal] = []

    async def block(parent: Signal, then: str) -> None:
        async with parent.child_scope() as child:
            children.append(child)
            assert parent._callbacks  # adopted while the block runs
            if then == "parent aborts":
                asyncio.get_running_loop().call_soon(parent.abort, ValueError("gone"))
            elif then == "child aborts":
                child.abort(TimeoutError("own"))
            else:
                return
            await asyncio.sleep(10)

    async def scenario() -> None:
        parent = Signal()
        await block(parent, "ends")
        assert not parent._callbacks  # detached at the end
        parent.abort(ValueError("later"))
        assert not children[-1].aborted

        parent = Signal()
        with pytest.raises(ValueError, match="gone"):
            await block(parent, "parent aborts")
        assert isinstance(children[-1].reason, ValueError)

        parent = Signal()
        with pytest.raises(TimeoutError, match="own"):
            await block(parent, "child aborts")
        assert not parent.aborted
        assert not parent._callbacks

        aborted = Signal()
        aborted.abort(ValueError("before"))
        with pytest.raises(ValueError, match="before"):
            await block(aborted, "ends")
        assert len(children) == 3  # the block never started

    asyncio.run(scenario())


def test_abort_deferred_wakes_waiters_now_and_leaves_callbacks_to_the_caller() -> None:
    """abort_deferred: aborted and waiters woken on return; add_callback callbacks run only by the function it returns."""
    signal = Signal()
    child = signal.child()
    calls: list[BaseException] = []
    signal.add_callback(calls.append)
    child.add_callback(calls.append)
    woken = threading.Event()
    waiter = threading.Thread(target=lambda: woken.set() if signal.wait(5) else None)
    waiter.start()
    deadline = time.monotonic() + 10
    while not signal._callbacks or len(signal._callbacks) < 3:  # the waiter registered
        assert time.monotonic() < deadline, "the waiter never registered"
        time.sleep(0.001)
    reason = RuntimeError("lost")
    run = signal.abort_deferred(reason)
    assert signal.reason is reason
    assert child.reason is reason
    assert woken.wait(5)
    waiter.join()
    assert calls == []
    assert run is not None
    run()
    assert calls == [reason, reason]
    assert signal.abort_deferred(RuntimeError("again")) is None


def test_abort_deferred_with_no_callback_waiting_returns_none() -> None:
    """Nothing left to run: abort_deferred returns None, and the signal has aborted."""
    signal = Signal()
    assert signal.abort_deferred(ValueError("x")) is None
    assert signal.aborted


def test_abort_wakes_every_waiter_before_any_callback_runs() -> None:
    """A slow callback registered first never keeps a waiter (of the signal or a child) asleep."""
    signal = Signal()
    order: list[str] = []
    signal.add_callback(lambda _reason: order.append("callback"))
    signal.add_wakeup(lambda _reason: order.append("wake-up"))
    signal.child().add_wakeup(lambda _reason: order.append("child's wake-up"))
    assert signal.abort()
    assert order == ["wake-up", "child's wake-up", "callback"]


def test_abort_deferred_refuses_a_reason_that_is_not_an_exception() -> None:
    signal = Signal()
    with pytest.raises(ValidationError, match=r"Signal.abort_deferred\(reason\): the reason must be an exception"):
        signal.abort_deferred("lost")  # type: ignore[arg-type]
    assert not signal.aborted


def test_a_wakeup_added_after_the_abort_runs_at_once_and_what_it_raises_is_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    signal = Signal()
    signal.abort(ValueError("gone"))

    def broken(_reason: BaseException) -> None:
        raise RuntimeError("broken wake-up")

    with caplog.at_level(logging.ERROR):
        remove = signal.add_wakeup(broken)
    remove()
    assert "waking a waiter for a signal failed" in caplog.text
