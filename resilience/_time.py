"""Time as a seam: every clock read, sleep and timer of the library goes through a `TimeProvider`."""

from __future__ import annotations

import asyncio
import random as _random
import time as _time
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from resilience._runtime._threads import resolve_threadsafe
from resilience._runtime._timers import TIMER_THREAD

if TYPE_CHECKING:
    import threading
    from collections.abc import Callable
    from types import ModuleType
    from typing import Any

__all__ = [
    "SYSTEM_TIME",
    "ClockWaits",
    "SystemTimeProvider",
    "TimeProvider",
    "TimerHandle",
    "clock_wait",
    "clock_wait_async",
    "lease_clock",
    "monotonic_source",
    "sync_call_later",
    "wait_event",
    "wait_future",
]


@runtime_checkable
class TimerHandle(Protocol):
    """What `TimeProvider.call_later` returns."""

    def cancel(self) -> None:
        """Prevent the callback from running if it has not run yet (idempotent)."""
        ...


@runtime_checkable
class TimeProvider(Protocol):
    """The clock, sleeps, timers and randomness that the library uses.

    `monotonic()` measures durations; `time()` is wall-clock seconds since the epoch (only for
    display). `call_later` runs a quick callback after `delay` seconds, on a thread or loop of
    the provider's choosing. `random()` is the source of jitter (seedable in tests).

    The clock owns waiting: every wait of the library (a sleep, a wait for a release, a permit
    or an abort, bounded by a timeout) goes through the clock. A provider may also offer
    `wait(event, timeout)` and `wait_async(future, timeout)` (`ClockWaits`: the system and the
    fake clocks do, so a clock whose time is not real decides what waiting means); without
    them the library waits on the provider's `call_later` timers (`clock_wait`).
    """

    def monotonic(self) -> float:
        """Seconds on a clock that never goes back."""
        ...

    def time(self) -> float:
        """Wall-clock seconds since the epoch."""
        ...

    def sleep(self, seconds: float) -> None:
        """Block the calling thread for `seconds`."""
        ...

    async def sleep_async(self, seconds: float) -> None:
        """Suspend the calling task for `seconds`."""
        ...

    def call_later(self, delay: float, callback: Callable[[], object]) -> TimerHandle:
        """Run `callback()` once, `delay` seconds from now, unless cancelled."""
        ...

    def random(self) -> _random.Random:
        """The random source for jitter."""
        ...


@runtime_checkable
class ClockWaits(Protocol):
    """The waits a `TimeProvider` may offer itself (the system and the fake clocks do)."""

    def wait(self, event: threading.Event, timeout: float) -> bool:
        """Block until `event` is set (True) or `timeout` seconds pass (False).

        `event` is the caller's own one-shot wake-up: a clock may set it itself when the
        timeout falls due, so the caller tells why it woke from its own state.
        """
        ...

    async def wait_async(self, future: asyncio.Future[Any], timeout: float) -> bool:
        """Suspend until `future` is done (True) or `timeout` seconds pass (False); `future` is left as it is."""
        ...


def clock_wait(provider: TimeProvider, event: threading.Event, timeout: float) -> bool:
    """`provider.wait(event, timeout)` when it offers `ClockWaits`, else a wait on its timers."""
    if isinstance(provider, ClockWaits):
        return provider.wait(event, timeout)
    return wait_event(provider, event, timeout)


async def clock_wait_async(provider: TimeProvider, future: asyncio.Future[Any], timeout: float) -> bool:
    """`provider.wait_async(future, timeout)` when it offers `ClockWaits`, else a wait on its timers."""
    if isinstance(provider, ClockWaits):
        return await provider.wait_async(future, timeout)
    return await wait_future(provider, future, timeout)


async def wait_future(provider: TimeProvider, future: asyncio.Future[Any], timeout: float) -> bool:
    """`ClockWaits.wait_async` on `provider`'s own timers (which may fire on any thread)."""
    if future.done():
        return True
    loop = asyncio.get_running_loop()
    woken: asyncio.Future[None] = loop.create_future()

    def wake(_: object = None) -> None:  # `future` is done, or the timer fired (on any thread)
        resolve_threadsafe(loop, woken)

    future.add_done_callback(wake)
    timer = provider.call_later(timeout, wake)
    try:
        await woken
    finally:
        timer.cancel()
        future.remove_done_callback(wake)
    return future.done()


class SystemTimeProvider:
    """The real clock. Reads `time.monotonic`/`time.time` at call time (so freezegun moves it).

    `call_later` uses the running event loop when called from one (the callback then runs on
    that loop's thread) and otherwise one shared timer thread for the whole process.
    """

    __slots__ = ("_random",)

    def __init__(self) -> None:
        self._random = _random.Random()  # noqa: S311 - jitter, not cryptography

    def monotonic(self) -> float:
        """`time.monotonic()`, looked up at call time."""
        return _time.monotonic()

    def time(self) -> float:
        """`time.time()`, looked up at call time."""
        return _time.time()

    def sleep(self, seconds: float) -> None:
        """`time.sleep`."""
        _time.sleep(seconds)

    async def sleep_async(self, seconds: float) -> None:
        """`asyncio.sleep`."""
        await asyncio.sleep(seconds)

    def wait(self, event: threading.Event, timeout: float) -> bool:
        """`event.wait(timeout)`: real time, no timer."""
        return event.wait(max(timeout, 0.0))

    async def wait_async(self, future: asyncio.Future[Any], timeout: float) -> bool:
        """`asyncio.wait` on `future` (never cancelled), real time."""
        if not future.done():
            await asyncio.wait((future,), timeout=max(timeout, 0.0))
        return future.done()

    def call_later(self, delay: float, callback: Callable[[], object]) -> TimerHandle:
        """Schedule on the running loop if there is one, else on the shared timer thread."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # outside a loop: only sync waits get here, where a raise costs nothing
            return TIMER_THREAD.call_later(delay, callback)
        return loop.call_later(delay, callback)

    def random(self) -> _random.Random:
        """One `random.Random` per provider."""
        return self._random

    def __repr__(self) -> str:
        return "SystemTimeProvider()"


SYSTEM_TIME = SystemTimeProvider()
"""The process-wide default provider (a module singleton, so per-provider state is shared)."""


class _LeaseTime(SystemTimeProvider):
    """The system clock as leases read it: the shared timer thread's real clock and its timers.

    A lease's deadline and renewals, the timer that drives them and a memory store's expiry
    must read one clock. `SystemTimeProvider` follows a clock-patching tool (freezegun) for
    whoever reads it, and so does an event loop's `time()`, but the timer thread does not: a
    lease that mixed them was declared lost when a freeze began, or never renewed nor watched
    after one ended (docs/decisions.md). Its timers are the timer thread's, sync and async
    alike (the async runtime hops each firing onto the lease's loop).
    """

    __slots__ = ()

    # The real monotonic clock (`TIMER_THREAD.monotonic`, fixed when the timer thread object is
    # made) as the method itself: read several times per lease, it costs no Python frame.
    monotonic = staticmethod(TIMER_THREAD.monotonic)

    def call_later(self, delay: float, callback: Callable[[], object]) -> TimerHandle:
        """On the shared timer thread, even inside an event loop (whose clock a freeze moves)."""
        return TIMER_THREAD.call_later(delay, callback)


_LEASE_TIME = _LeaseTime()


def lease_clock(time_provider: TimeProvider) -> TimeProvider:
    """The clock leases on `time_provider` run on: the real one for the system clock, else itself.

    A subclass of `SystemTimeProvider` that reads or schedules differently is used as it is.
    """
    kind = type(time_provider)
    if (
        issubclass(kind, SystemTimeProvider)
        and kind.monotonic is SystemTimeProvider.monotonic
        and kind.call_later is SystemTimeProvider.call_later
    ):
        return _LEASE_TIME
    return time_provider


def sync_call_later(time_provider: TimeProvider, delay: float, callback: Callable[[], object]) -> TimerHandle:
    """`call_later` for sync code: never on the calling thread's event loop.

    With the system clock it uses the shared timer thread (a sync call made from a coroutine
    blocks that loop, so a loop timer would not fire while it runs); any other provider is
    asked as usual.
    """
    if isinstance(time_provider, SystemTimeProvider):
        return TIMER_THREAD.call_later(delay, callback)
    return time_provider.call_later(delay, callback)


def wait_event(time_provider: TimeProvider, event: threading.Event, timeout: float) -> bool:
    """Block until `event` is set (True) or `timeout` seconds pass on `time_provider`'s timers (False).

    A wait that never moves an auto-advancing clock: what sets `event` is work on another
    thread, not a timer. The clock's timer sets `event` itself when it fires (the caller's
    one-shot event). For a clock without waits of its own (`clock_wait`), and the fake clock's.
    """
    if event.is_set():
        return True
    fired: list[bool] = []

    def expire() -> None:
        fired.append(True)
        event.set()

    timer = time_provider.call_later(timeout, expire)
    try:
        event.wait()
    finally:
        timer.cancel()
    return not fired


def monotonic_source(time_provider: TimeProvider) -> ModuleType | TimeProvider:
    """What to call `.monotonic()` on for `time_provider`'s clock, the cheapest way.

    The system clock is read through the `time` module at call time (freezegun still moves
    it) without the provider's method frame; any other provider is itself.
    """
    return _time if type(time_provider) is SystemTimeProvider else time_provider
