"""Signals, the real clock, the shared timer thread and the fake clock."""

from __future__ import annotations

import asyncio
import logging
import threading

import pytest

from resilience import OperationAbortedError, Signal, SystemTimeProvider
from resilience._runtime._timers import TIMER_THREAD, TimerThread
from resilience.strategies._common import wait, wait_async
from resilience.testing import FakeTimeProvider


def test_abort_runs_callbacks_once_and_children_follow() -> None:
    """abort() runs callbacks once (logging their errors); children abort with the same reason."""
    signal = Signal()
    seen: list[BaseException] = []
    child = signal.child()
    grandchild = child.child()
    signal.add_callback(seen.append)
    signal.add_callback(lambda reason: 1 / 0)
    remove = signal.add_callback(lambda reason: seen.append(KeyError()))
    remove()
    assert signal.abort()
    assert not signal.abort()
    assert isinstance(signal.reason, OperationAbortedError)
    assert seen == [signal.reason]
    assert grandchild.reason is signal.reason
    with pytest.raises(OperationAbortedError):
        grandchild.raise_if_aborted()
    late: list[BaseException] = []
    signal.add_callback(late.append)()
    signal.add_callback(lambda reason: 1 / 0)
    assert late == [signal.reason]
    assert signal.child().aborted
    assert "aborted" in repr(signal)
    assert "active" in repr(Signal())


def test_detached_child_no_longer_follows() -> None:
    """After detach() a child keeps no callback in its parent and ignores its abort."""
    parent = Signal()
    child = parent.child()
    child.detach()
    child.detach()
    assert not parent._callbacks
    parent.abort()
    assert not child.aborted


def test_signal_wait_real_time() -> None:
    """wait() returns True at once when aborted (from another thread), False on timeout."""
    signal = Signal()
    assert not signal.wait(0)
    threading.Timer(0.001, signal.abort).start()
    assert signal.wait(5)
    assert signal.wait()


async def test_signal_wait_async() -> None:
    """wait_async() wakes on abort from another thread, or times out."""
    signal = Signal()
    assert not await signal.wait_async(0)
    threading.Timer(0.001, signal.abort).start()
    assert await signal.wait_async(5)
    assert await signal.wait_async()
    other = Signal()
    asyncio.get_running_loop().call_soon(other.abort)
    assert await other.wait_async()


async def test_cancel_scope_converts_only_its_own_cancellation() -> None:
    """The scope raises the reason for its own abort and lets others' cancellations through."""
    signal = Signal()
    reason = RuntimeError("why")
    asyncio.get_running_loop().call_soon(signal.abort, reason)
    with pytest.raises(RuntimeError) as caught:
        async with signal.cancel_scope():
            await asyncio.sleep(5)
    assert caught.value is reason
    with pytest.raises(RuntimeError):
        async with signal.cancel_scope():
            pass  # already aborted: refuses to start

    returned = Signal()
    async with returned.cancel_scope():
        returned.abort()  # aborted inside the block, which then returns without awaiting
    threaded = Signal()
    threading.Timer(0.001, threaded.abort).start()
    with pytest.raises(OperationAbortedError):
        async with threaded.cancel_scope():
            await asyncio.sleep(5)


def test_system_time_provider() -> None:
    """The real clock reads time at call time; call_later outside a loop uses the timer thread."""
    clock = SystemTimeProvider()
    assert clock.monotonic() > 0
    assert clock.time() > 1e9
    clock.sleep(0)
    assert clock.random() is clock.random()
    fired = threading.Event()
    clock.call_later(0, fired.set)
    assert fired.wait(5)
    cancelled = clock.call_later(0.001, fired.clear)
    cancelled.cancel()
    assert repr(clock) == "SystemTimeProvider()"


async def test_system_time_provider_in_a_loop() -> None:
    """Inside a loop, call_later uses the loop and sleep_async awaits."""
    clock = SystemTimeProvider()
    fired = asyncio.Event()
    clock.call_later(0, fired.set)
    await clock.sleep_async(0)
    await asyncio.wait_for(fired.wait(), 5)


def test_timer_thread_orders_cancels_and_compacts(caplog: pytest.LogCaptureFixture) -> None:
    """The shared timer runs callbacks by deadline, skips cancelled ones and logs failures."""
    timers = TimerThread(name="test-timer-2")
    order: list[int] = []
    done = threading.Event()
    many = [timers.call_later(60, lambda: None) for _ in range(1100)]
    for handle in many:
        handle.cancel()
        handle.cancel()
    assert all(handle.cancelled for handle in many)
    later = timers.call_later(0.02, lambda: order.append(2))
    sooner = timers.call_later(0, lambda: order.append(1))
    timers.call_later(0, lambda: 1 / 0)
    timers.call_later(0.04, done.set)
    with caplog.at_level(logging.ERROR, logger="resilience"):
        assert done.wait(5)
    # By deadline, not by call: a loaded machine that pauses 20 ms between the two calls gives
    # the second the later deadline.
    assert order == ([1, 2] if sooner.when < later.when else [2, 1])
    timers._reset()
    assert timers._thread is None
    assert TIMER_THREAD is not timers


def test_fake_clock_rules(caplog: pytest.LogCaptureFixture) -> None:
    """The fake clock refuses to go back, fires timers in order and logs callback errors."""
    clock = FakeTimeProvider(start=10.0, seed=3)
    assert clock.time() == 10.0
    with pytest.raises(ValueError):
        clock.advance(-1)
    fired: list[float] = []
    clock.call_later(2, lambda: fired.append(clock.monotonic()))
    clock.call_later(1, lambda: 1 / 0)
    cancelled = clock.call_later(1.5, lambda: fired.append(-1))
    cancelled.cancel()
    assert clock.pending_timers == 2
    with caplog.at_level(logging.ERROR, logger="resilience"):
        clock.advance(5)
    assert fired == [12.0]
    assert clock.monotonic() == 15.0
    assert "now=15.0" in repr(clock)


def test_fake_clock_sleep_is_woken_by_advance_from_another_thread() -> None:
    """A sync sleeper on the fake clock wakes when another thread advances past its deadline."""
    clock = FakeTimeProvider()
    woke = threading.Event()

    def sleeper() -> None:
        clock.sleep(3)
        woke.set()

    thread = threading.Thread(target=sleeper)
    thread.start()
    while clock.pending_timers == 0:
        threading.Event().wait(0.001)
    clock.advance(3)
    thread.join(5)
    assert woke.is_set()


async def test_fake_clock_async_sleep_and_auto_advance() -> None:
    """sleep_async wakes on advance; auto_advance moves the clock by what is slept."""
    clock = FakeTimeProvider()
    sleeper = asyncio.ensure_future(clock.sleep_async(2))
    await asyncio.sleep(0)
    clock.advance(2)
    await asyncio.wait_for(sleeper, 5)
    auto = FakeTimeProvider(auto_advance=True)
    auto.sleep(2)
    await auto.sleep_async(3)
    assert auto.monotonic() == 5.0


def test_interruptible_wait_on_each_kind_of_clock() -> None:
    """wait() sleeps on the clock and returns True at once when the signal aborts."""
    signal = Signal()
    assert not wait(SystemTimeProvider(), 0.001, signal)
    assert not wait(FakeTimeProvider(), 0, signal)
    auto = FakeTimeProvider(auto_advance=True)
    assert not wait(auto, 4, signal)
    assert auto.monotonic() == 4
    manual = FakeTimeProvider()

    def advance_when_asleep() -> None:
        while manual.pending_timers == 0:
            threading.Event().wait(0.001)
        manual.advance(1)

    threading.Thread(target=advance_when_asleep).start()
    assert not wait(manual, 1, signal)
    threading.Timer(0.001, signal.abort).start()
    assert wait(SystemTimeProvider(), 5, signal)
    assert wait(manual, 1, signal)


async def test_interruptible_wait_async() -> None:
    """wait_async() sleeps, ends early on abort, and lets a foreign cancellation through."""
    signal = Signal()
    assert not await wait_async(FakeTimeProvider(auto_advance=True), 1, signal)
    assert not await wait_async(FakeTimeProvider(), 0, signal)
    task = asyncio.ensure_future(wait_async(FakeTimeProvider(), 10, signal))
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    asyncio.get_running_loop().call_soon(signal.abort)
    assert await wait_async(FakeTimeProvider(), 10, signal)
    assert await wait_async(FakeTimeProvider(), 10, signal)
