"""Time as a seam: every clock read, sleep and timer of the library goes through a `TimeProvider`."""

from __future__ import annotations

import asyncio
import random as _random
import time as _time
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from resilience._timers import TIMER_THREAD

if TYPE_CHECKING:
    import threading
    from collections.abc import Callable

__all__ = [
    "SYSTEM_TIME",
    "SystemTimeProvider",
    "TimeProvider",
    "TimerHandle",
    "lease_clock",
    "sync_call_later",
    "wait_event",
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

    def monotonic(self) -> float:
        """The real monotonic clock (`TIMER_THREAD.monotonic`)."""
        return TIMER_THREAD.monotonic()

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


def wait_event(time_provider: TimeProvider, event: threading.Event, seconds: float) -> None:
    """Block until `event` is set or `seconds` pass on `time_provider`'s clock.

    The system clock is real time: a plain timed wait, no timer.
    """
    if isinstance(time_provider, SystemTimeProvider):
        event.wait(seconds)
        return
    timer = time_provider.call_later(seconds, event.set)
    try:
        event.wait()
    finally:
        timer.cancel()
