import asyncio
import random
import threading
import time
from collections.abc import Callable

import freezegun
import pytest

from resilience import SystemTimeProvider, TimeProvider, TimerHandle
from resilience._runtime._timers import TimerThread
from resilience._time import SYSTEM_TIME, ClockWaits, clock_wait
from resilience.testing import FakeTimeProvider


def test_both_providers_implement_the_protocol() -> None:
    """SystemTimeProvider and FakeTimeProvider are TimeProviders."""
    assert isinstance(SystemTimeProvider(), TimeProvider)
    assert isinstance(FakeTimeProvider(), TimeProvider)


def test_fake_clock_moves_only_when_advanced(clock: FakeTimeProvider) -> None:
    """monotonic() and time() stay put until advance()."""
    assert clock.monotonic() == 0.0
    clock.advance(1.5)
    assert clock.monotonic() == 1.5
    assert clock.time() == 1.5
    assert FakeTimeProvider(start=100).monotonic() == 100.0


def test_fake_clock_refuses_to_go_back(clock: FakeTimeProvider) -> None:
    """A negative advance raises ValueError."""
    with pytest.raises(ValueError, match="cannot go back"):
        clock.advance(-1)


def test_call_later_fires_in_deadline_order_at_its_time(clock: FakeTimeProvider) -> None:
    """advance() runs due callbacks in order, with the clock set to each deadline."""
    fired: list[tuple[str, float]] = []
    clock.call_later(2, lambda: fired.append(("b", clock.monotonic())))
    clock.call_later(1, lambda: fired.append(("a", clock.monotonic())))
    cancelled = clock.call_later(1.5, lambda: fired.append(("x", clock.monotonic())))
    cancelled.cancel()
    clock.call_later(5, lambda: fired.append(("late", clock.monotonic())))
    assert clock.pending_timers == 3
    clock.advance(3)
    assert fired == [("a", 1.0), ("b", 2.0)]
    assert clock.monotonic() == 3.0
    assert clock.pending_timers == 1


def test_a_callback_may_schedule_another(clock: FakeTimeProvider) -> None:
    """Timers scheduled by a firing callback fire in the same advance when due."""
    fired: list[float] = []

    def first() -> None:
        fired.append(clock.monotonic())
        clock.call_later(1, lambda: fired.append(clock.monotonic()))

    clock.call_later(1, first)
    clock.advance(5)
    assert fired == [1.0, 2.0]


def test_a_failing_callback_is_logged(clock: FakeTimeProvider, caplog: pytest.LogCaptureFixture) -> None:
    """A callback that raises is logged; later callbacks still run."""
    fired: list[int] = []
    clock.call_later(1, lambda: 1 / 0)
    clock.call_later(2, lambda: fired.append(1))
    clock.advance(2)
    assert fired == [1]
    assert "a timer callback raised" in caplog.text


def test_auto_advance_makes_long_sleeps_instant() -> None:
    """With auto_advance a ten-minute sleep returns at once and moves the clock."""
    clock = FakeTimeProvider(auto_advance=True)
    started = time.monotonic()
    clock.sleep(600)
    clock.sleep(-1)
    assert clock.monotonic() == 600
    assert time.monotonic() - started < 10  # far from the 600 s slept: slack for a loaded machine


async def test_auto_advance_in_asyncio() -> None:
    """With auto_advance an async ten-minute sleep returns at once."""
    clock = FakeTimeProvider(auto_advance=True)
    started = time.monotonic()
    await clock.sleep_async(600)
    assert clock.monotonic() == 600
    assert time.monotonic() - started < 10


def test_a_sleeping_thread_wakes_when_another_advances(clock: FakeTimeProvider) -> None:
    """sleep() blocks until the clock passes its deadline."""
    woke = threading.Event()

    def sleeper() -> None:
        clock.sleep(10)
        woke.set()

    thread = threading.Thread(target=sleeper)
    thread.start()
    while clock.pending_timers == 0:
        time.sleep(0.001)
    clock.advance(9)
    assert not woke.wait(0.02)
    clock.advance(1)
    assert woke.wait(5)
    thread.join()


async def test_a_sleeping_task_wakes_when_the_test_advances(clock: FakeTimeProvider) -> None:
    """sleep_async() suspends until the clock passes its deadline."""
    task = asyncio.create_task(clock.sleep_async(10))
    await asyncio.sleep(0)
    clock.advance(5)
    await asyncio.sleep(0)
    assert not task.done()
    clock.advance(5)
    await asyncio.wait_for(task, 5)
    assert clock.pending_timers == 0


async def test_a_cancelled_async_sleep_leaves_no_timer(clock: FakeTimeProvider) -> None:
    """Cancelling a fake sleep cancels its timer."""
    task = asyncio.create_task(clock.sleep_async(10))
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert clock.pending_timers == 0


def test_seeded_randomness_is_deterministic() -> None:
    """The same seed gives the same jitter."""
    assert FakeTimeProvider(seed=7).random().random() == FakeTimeProvider(seed=7).random().random()


def test_system_time_reads_the_clock_at_call_time() -> None:
    """freezegun moves SystemTimeProvider because it looks the clock up at each call."""
    provider = SystemTimeProvider()
    with freezegun.freeze_time("2030-01-01") as frozen:
        before_wall, before_mono = provider.time(), provider.monotonic()
        frozen.tick(60)
        assert provider.time() - before_wall == pytest.approx(60)
        assert provider.monotonic() - before_mono == pytest.approx(60)
    assert repr(provider) == "SystemTimeProvider()"
    assert provider.random() is provider.random()


def test_system_call_later_uses_the_shared_timer_thread() -> None:
    """Outside a loop, callbacks run on one shared 'resilience-timer' thread."""
    names: list[str] = []
    done = threading.Event()
    SYSTEM_TIME.call_later(0.01, lambda: (names.append(threading.current_thread().name), done.set()))
    skipped = SYSTEM_TIME.call_later(0.005, lambda: names.append("cancelled"))
    skipped.cancel()
    assert done.wait(5)
    assert names == ["resilience-timer"]


async def test_system_call_later_uses_the_running_loop() -> None:
    """Inside a loop, call_later is the loop's own timer."""
    fired = asyncio.Event()
    handle = SYSTEM_TIME.call_later(0.001, fired.set)
    assert isinstance(handle, asyncio.TimerHandle)
    await asyncio.wait_for(fired.wait(), 5)
    SYSTEM_TIME.sleep(0)
    await SYSTEM_TIME.sleep_async(0)


def test_timer_thread_compacts_cancelled_entries_and_survives_fork_reset(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Cancelled long timers do not pile up; a failing callback is logged; fork resets state."""
    timers = TimerThread(name="test-timer")
    handles = [timers.call_later(3600, lambda: None) for _ in range(3000)]
    for handle in handles:
        handle.cancel()
        handle.cancel()
    assert handles[0].cancelled
    done = threading.Event()
    timers.call_later(0, lambda: 1 / 0)
    timers.call_later(0.001, done.set)
    assert done.wait(5)
    assert len(timers._heap) < 3000
    assert "a timer callback raised" in caplog.text
    timers._reset()
    assert timers._heap == []
    assert timers._thread is None


def test_wait_returns_when_the_event_is_set_or_the_timeout_passes(clock: FakeTimeProvider) -> None:
    """wait(event, timeout): True when set (at once if already set), False at the clock's timeout."""
    done = threading.Event()
    done.set()
    assert clock.wait(done, 5) is True
    assert SYSTEM_TIME.wait(done, 5) is True
    assert SYSTEM_TIME.wait(threading.Event(), 0.01) is False
    answers: list[bool] = []
    thread = threading.Thread(target=lambda: answers.append(clock.wait(threading.Event(), 3)))
    thread.start()
    while clock.pending_timers == 0:
        time.sleep(0.001)
    clock.advance(3)
    thread.join(30)
    assert answers == [False]


def test_an_auto_advancing_wait_stops_at_the_timer_that_wakes_it() -> None:
    """In auto mode wait() moves the clock timer by timer and stops where the event is set."""
    clock = FakeTimeProvider(auto_advance=True)
    woken = threading.Event()
    clock.call_later(2, woken.set)
    clock.call_later(4, lambda: None)
    assert clock.wait(woken, 10) is True
    assert clock.monotonic() == 2
    assert clock.wait(threading.Event(), 10) is False
    assert clock.monotonic() == 12


async def test_wait_async_leaves_the_future_alone() -> None:
    """wait_async(future, timeout): True once done, False at the timeout, the future never cancelled."""
    loop = asyncio.get_running_loop()
    pending: asyncio.Future[None] = loop.create_future()
    assert await SYSTEM_TIME.wait_async(pending, 0.01) is False
    assert not pending.cancelled()
    loop.call_later(0.01, pending.set_result, None)
    assert await SYSTEM_TIME.wait_async(pending, 60) is True
    manual = FakeTimeProvider()
    future: asyncio.Future[None] = loop.create_future()
    waiting = asyncio.ensure_future(manual.wait_async(future, 5))
    await asyncio.sleep(0)
    manual.advance(5)
    assert await waiting is False
    assert not future.done()
    auto = FakeTimeProvider(auto_advance=True)
    auto.call_later(3, lambda: future.set_result(None))
    assert await auto.wait_async(future, 10) is True
    assert auto.monotonic() == 3


def test_a_provider_without_its_own_waits_is_waited_on_through_its_timers() -> None:
    """A TimeProvider with only the members DESIGN §2.10 names is accepted, and waited on through its call_later."""

    class Ticking(TimeProvider):
        def __init__(self) -> None:
            self.fake = FakeTimeProvider()

        def monotonic(self) -> float:
            return self.fake.monotonic()

        def time(self) -> float:
            return self.fake.time()

        def sleep(self, seconds: float) -> None:
            self.fake.sleep(seconds)

        async def sleep_async(self, seconds: float) -> None:
            await self.fake.sleep_async(seconds)

        def call_later(self, delay: float, callback: Callable[[], object]) -> TimerHandle:
            return self.fake.call_later(delay, callback)

        def random(self) -> random.Random:
            return self.fake.random()

    ticking = Ticking()
    assert isinstance(ticking, TimeProvider)
    answers: list[bool] = []
    assert not isinstance(ticking, ClockWaits)
    thread = threading.Thread(target=lambda: answers.append(clock_wait(ticking, threading.Event(), 1)))
    thread.start()
    while ticking.fake.pending_timers == 0:
        time.sleep(0.001)
    ticking.fake.advance(1)
    thread.join(30)
    assert answers == [False]


def test_a_structural_provider_with_the_documented_members_builds_a_pipeline() -> None:
    """DESIGN §2.10's six members are the whole protocol: a clock that is not a subclass still builds and runs."""
    from resilience import ResiliencePipelineBuilder

    class Plain:
        def __init__(self) -> None:
            self.real = SystemTimeProvider()

        def monotonic(self) -> float:
            return self.real.monotonic()

        def time(self) -> float:
            return self.real.time()

        def sleep(self, seconds: float) -> None:
            self.real.sleep(seconds)

        async def sleep_async(self, seconds: float) -> None:
            await self.real.sleep_async(seconds)

        def call_later(self, delay: float, callback: Callable[[], object]) -> TimerHandle:
            return self.real.call_later(delay, callback)

        def random(self) -> random.Random:
            return self.real.random()

    plain = Plain()
    assert isinstance(plain, TimeProvider)
    calls: list[int] = []

    def flaky() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise ConnectionError
        return "ok"

    pipeline = ResiliencePipelineBuilder(time_provider=plain).add_retry(max_retries=3, delay=0.01).build()
    assert pipeline.execute(flaky) == "ok"
    assert len(calls) == 3  # two retry delays waited on its call_later timers (real time, 10 ms each)
