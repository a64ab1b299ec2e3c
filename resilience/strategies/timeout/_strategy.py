"""The timeout strategy: a deadline on the inner part of the pipeline, sync or asyncio.

Both modes run the inner part under a derived context with a child signal that a timer on the
time provider aborts at the deadline with a fresh `TimeoutRejectedError` (in a sync execution
the child, and the timer, are made only when something reads the signal or the deadline is
found passed: `ResilienceContext.derive_scope(deadline=...)` and `_LazyDeadline`; the async
executions of one strategy share one timer: `_Deadlines`).

- **Async**: the callable runs in the caller's task under `child_signal.cancel_scope()`, so the
  deadline cancels it; only this strategy's own deadline becomes `TimeoutRejectedError`, while
  an outer timeout or the caller's cancellation passes through unchanged.
- **Sync**: cooperative. Python cannot interrupt a running thread, so the callable keeps
  running after the deadline unless it looks at its signal (`get_context().signal`:
  `raise_if_aborted()`, `wait()`, `aborted`). What the execution then reports is decided when
  the callable ends: a return value is returned, the signal's own reason propagates unchanged,
  and any other `Exception` becomes `TimeoutRejectedError` raised from it.
"""

from __future__ import annotations

import contextlib
import functools
import math
import threading
import weakref
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from resilience._lease._workers import off_timer_thread
from resilience._runtime._threads import on_fork_in_child
from resilience._runtime._timers import TIMER_THREAD
from resilience._time import lease_clock
from resilience._validation import Duration, Problems, generated_seconds, to_seconds
from resilience.exceptions import TimeoutRejectedError
from resilience.strategies._base import HANDS_ON
from resilience.strategies._common import Steps, call_back, call_back_async, run_steps, run_steps_async
from resilience.telemetry._event import Severity

if TYPE_CHECKING:
    import asyncio
    import datetime as dt
    from collections.abc import Awaitable, Callable, Iterable

    from resilience._context import ResilienceContext
    from resilience._signal import Signal
    from resilience._time import TimeProvider, TimerHandle
    from resilience.strategies._base import StrategyBuildContext

__all__ = [
    "OnTimeoutArguments",
    "TimeoutGeneratorArguments",
    "TimeoutStrategy",
    "TimeoutStrategyOptions",
    "timeout_strategy",
]

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class OnTimeoutArguments:
    """What `on_timeout` receives when the strategy raises `TimeoutRejectedError`."""

    context: ResilienceContext
    timeout: float
    """The timeout that passed, in seconds."""


@dataclass(frozen=True, slots=True)
class TimeoutGeneratorArguments:
    """What `timeout_generator` receives before each execution."""

    context: ResilienceContext


@dataclass(frozen=True, slots=True, kw_only=True)
class TimeoutStrategyOptions:
    """Options of the timeout strategy (`timeout_strategy(...)`); validated at `build()`."""

    timeout: Duration = 30.0
    timeout_generator: Callable[[TimeoutGeneratorArguments], float | dt.timedelta | None] | None = None
    on_timeout: Callable[[OnTimeoutArguments], object] | None = None
    name: str = "Timeout"

    def validate(self, context: StrategyBuildContext, /) -> Iterable[str]:  # noqa: ARG002 - protocol
        """Every problem with these options, as `"<option>: <what>"`."""
        problems = Problems()
        problems.duration("timeout", self.timeout, positive=True)
        problems.callable("timeout_generator", self.timeout_generator)
        problems.callable("on_timeout", self.on_timeout)
        problems.name("name", self.name)
        return problems.items

    def create(self, context: StrategyBuildContext, /) -> TimeoutStrategy:
        """A timeout strategy for one built pipeline."""
        return TimeoutStrategy(self, context)


def timeout_strategy(
    timeout: Duration = 30.0,
    /,
    *,
    timeout_generator: Callable[[TimeoutGeneratorArguments], float | dt.timedelta | None] | None = None,
    on_timeout: Callable[[OnTimeoutArguments], object] | None = None,
    name: str = "Timeout",
) -> TimeoutStrategyOptions:
    """Abort the inner part of the pipeline after `timeout` seconds with `TimeoutRejectedError`.

    `timeout_generator(args)` may choose the timeout per execution (None: `timeout`; zero, a
    negative or an infinite value: no timeout). In a sync execution the timeout is cooperative:
    see `docs/strategies.md`.
    """
    return TimeoutStrategyOptions(**locals())


class _Deadline:
    """The timer's target: aborts the scope's signal with a fresh `TimeoutRejectedError`."""

    __slots__ = ("error", "signal", "timeout")

    def __init__(self, signal: Signal | None, timeout: float) -> None:
        self.signal = signal
        self.timeout = timeout
        self.error: TimeoutRejectedError | None = None

    def __call__(self) -> None:
        # The signal (and its children) read as aborted at once; the callbacks registered on
        # them are user code, which never runs on the shared timer thread (it would delay
        # every lease and timeout of the process): there they go to the callback pool.
        run = self._abort()
        if run is not None:
            off_timer_thread(run)

    def _abort(self) -> Callable[[], None] | None:
        """Abort the signal with a fresh error; the callbacks left to run (None if it had aborted)."""
        signal = self.signal
        assert signal is not None  # a lazy deadline fires only once its signal is made
        error = self.error = TimeoutRejectedError(timeout=self.timeout)  # before the abort: whose it is
        return signal.abort_deferred(error)

    @property
    def fired(self) -> bool:
        """True when the signal aborted because of this deadline (not the caller's abort)."""
        error = self.error
        return error is not None and self.signal is not None and self.signal.reason is error


_FIRING = threading.Lock()


class _LazyDeadline(_Deadline):
    """The sync timeout's `LazyDeadline`: no timer until the scope's signal is made.

    Most callables never read their signal, and then nothing can see the abort before the
    callable ends: the deadline is only compared with the clock when an `Exception` ends the
    callable, when the scope ends, and when `abort_reason` walks past it. The first read of
    the signal (`arm`) schedules the timer for the time left, or fires at once if none is:
    what anyone observes is what an eager timer gives.
    """

    __slots__ = ("_clock", "_due", "_ended", "_timer")

    def __init__(self, timeout: float, clock: TimeProvider) -> None:
        _Deadline.__init__(self, None, timeout)
        self._clock = clock
        self._due = clock.monotonic() + timeout
        self._timer: TimerHandle | None = None
        self._ended = False

    def arm(self, signal: Signal, /) -> None:
        """The scope's signal was just made: abort it at the deadline (now if it passed)."""
        self.signal = signal
        if self._ended or self.error is not None:
            return  # judged when the scope ended, or fired already
        remaining = self._due - self._clock.monotonic()
        if remaining <= 0:
            self()
            return
        timer = self._timer = self._clock.call_later(remaining, self)
        if self.ended:  # the scope ended on another thread meanwhile: one of us cancels it
            timer.cancel()

    @property
    def ended(self) -> bool:
        """True once `end()` ran (read again after arming: another thread may end the scope)."""
        return self._ended

    def _abort(self) -> Callable[[], None] | None:
        # Fired once: by the timer, or on the calling thread when the clock says it is due
        # (the timer may still be on its way then: its late call must not replace the error,
        # or `fired` would not recognise the reason). Rare, so one lock for the process.
        with _FIRING:
            return None if self.error is not None else _Deadline._abort(self)

    def passed(self) -> bool:
        """Whether the deadline passed while the scope runs (the caller then fires it)."""
        return not self._ended and self._clock.monotonic() >= self._due

    def _fire_now(self, scope: ResilienceContext) -> None:
        signal = scope.signal  # made now if nobody read it (arm then fires it)
        if self.signal is None:  # another thread made it and has not armed yet
            self.signal = signal
        self()

    def expired(self, scope: ResilienceContext) -> bool:
        """`fired`, after firing a deadline that passed unobserved (an `Exception` ended the call)."""
        if self.error is None and self.passed():
            self._fire_now(scope)
        return self.fired

    def end(self, scope: ResilienceContext) -> None:
        """The scope ends: a deadline that passed unobserved aborts the signal now; no timer stays."""
        if self.signal is None and self.error is None and self.passed():
            self._fire_now(scope)  # a context kept past the scope reads as aborted, as with a timer
        self._ended = True
        timer = self._timer
        if timer is not None:
            timer.cancel()


class _Queued(_Deadline):
    """An async execution's deadline, waiting in a `_Deadlines` queue (which fires it when due)."""

    __slots__ = ("done", "due", "loop")
    due: float

    def __init__(self, signal: Signal, timeout: float, loop: asyncio.AbstractEventLoop) -> None:
        # Every field in one frame (no `_Deadline.__init__` call): one per async execution.
        self.signal = signal
        self.timeout = timeout
        self.error = None
        self.done = False
        self.loop = loop


class _Deadlines:
    """The pending deadlines of a strategy's async executions, in the order they fall due, and one timer.

    With one timeout for every execution, deadlines fall due in the order the executions
    started: a FIFO whose head is the earliest. An execution appends its deadline under the
    queue's lock (its clock read too, so the queue stays in due order) and marks it done when
    it ends, without the lock; done deadlines are dropped from the head, and swept from behind
    a long-running head, once the queue has grown by a sweep's worth, so an end costs the same
    however many executions run (a `deque.remove` would scan: 15 µs with 1,000 running). The
    one timer is armed for the head's due time; when it fires it aborts every deadline due, as
    a timer of each would, and arms itself for the new head. A timer armed and cancelled per
    execution cost nearly a quarter of the async timeout's success path (docs/decisions.md).

    A success leaves the timer armed for the executions that follow (firing with nothing
    due, it stops); an execution that ends in an exception or a cancellation disarms it when
    nothing else waits, so no timer outlives a failure. With the system clock the timer is
    the shared timer thread's, on the real clock (one strategy serves every thread and event
    loop), which hands each abort to the execution's loop: there it runs, callbacks included,
    as it did under a timer of that loop. A generated timeout gets a queue of its own (`disarm` at its end).
    """

    __slots__ = ("__weakref__", "_alarm", "_lock", "_sweep_at", "clock", "pending", "timeout")

    def __init__(self, timeout: float, clock: TimeProvider) -> None:
        self.timeout = timeout
        self.clock = clock
        self.pending: deque[_Queued] = deque()
        self._sweep_at = _SWEEP  # the length at which an end drops the done deadlines
        self._lock = threading.Lock()
        self._alarm: list[TimerHandle] | None = None  # the armed timer (None: none), its own token
        _ALL_DEADLINES.add(self)

    def add(self, signal: Signal, loop: asyncio.AbstractEventLoop) -> _Queued:
        """A deadline `timeout` from now that aborts `signal` (on `loop`, the execution's), armed."""
        deadline = _Queued(signal, self.timeout, loop)
        with self._lock:
            deadline.due = self.clock.monotonic() + self.timeout
            self.pending.append(deadline)
            if self._alarm is None:
                self._arm()
        return deadline

    def end(self, deadline: _Queued, *, disarm: bool) -> None:
        """`deadline`'s execution ended; with `disarm`, no timer stays if nothing else waits."""
        deadline.done = True  # one store: the timer skips it from now on
        if disarm or len(self.pending) > self._sweep_at:
            with self._lock:
                pending = self.pending
                while pending and pending[0].done:
                    pending.popleft()
                if len(pending) > self._sweep_at:  # done ones behind a long-running head
                    self.pending = pending = deque(queued for queued in pending if not queued.done)
                    self._sweep_at = 2 * len(pending) + _SWEEP  # amortised: a sweep per as many ends
                if disarm and not pending and self._alarm is not None:
                    self._alarm[0].cancel()
                    self._alarm = None  # `add` arms again when it reads None

    def _arm(self) -> None:
        # Under the lock, with no timer armed: arm one for the first due time, if any (the
        # head may be done: it fires then with nothing due, and arms for the next).
        if self.pending:
            delay = self.pending[0].due - self.clock.monotonic()
            alarm: list[TimerHandle] = []
            alarm.append(self.clock.call_later(delay, functools.partial(self._fire, alarm)))
            self._alarm = alarm

    def _fire(self, alarm: list[TimerHandle]) -> None:
        due: list[_Queued] = []
        with self._lock:
            if alarm is not self._alarm:
                return  # disarmed, or replaced
            self._alarm = None
            now = self.clock.monotonic()
            pending = self.pending
            while pending and (pending[0].done or pending[0].due <= now):
                head = pending.popleft()
                if not head.done:
                    head.done = True
                    due.append(head)
            self._arm()
        on_timer_thread = TIMER_THREAD.is_current()
        for deadline in due:
            if on_timer_thread:  # the abort and its callbacks run on the execution's loop
                with contextlib.suppress(RuntimeError):  # the loop closed: nothing left to abort
                    deadline.loop.call_soon_threadsafe(deadline)
            else:
                deadline()


_SWEEP = 64
"""Done deadlines a queue keeps at most beyond twice its live ones before an end sweeps them."""

_ALL_DEADLINES: weakref.WeakSet[_Deadlines] = weakref.WeakSet()


@on_fork_in_child
def _after_fork_in_child() -> None:
    # A thread of the parent may have been firing at fork time; the child has no such thread.
    global _FIRING  # noqa: PLW0603 - the module's one lock, replaced only in a forked child
    _FIRING = threading.Lock()
    # The parent's timers do not exist in a child either; the executions carried over do.
    for deadlines in list(_ALL_DEADLINES):
        deadlines._lock = threading.Lock()
        deadlines._alarm = None
        deadlines._arm()


def _generated_timeout(value: object, default: float) -> float | None:
    """The timeout for one execution from the generator's `value` (None: no timeout)."""
    seconds = generated_seconds(value, default, "timeout_generator", "seconds (float), a timedelta, or None")
    return None if seconds <= 0 or math.isinf(seconds) else seconds


class TimeoutStrategy:
    """The built timeout strategy."""

    traits = HANDS_ON

    __slots__ = ("_deadlines", "_generator", "_on_timeout", "_telemetry", "_time", "timeout")

    def __init__(self, options: TimeoutStrategyOptions, context: StrategyBuildContext) -> None:
        self.timeout = to_seconds(options.timeout)
        self._time = context.time_provider
        self._telemetry = context.telemetry
        self._generator = options.timeout_generator
        self._on_timeout = options.on_timeout
        self._deadlines = _Deadlines(self.timeout, lease_clock(self._time))

    def _timed_out(self, context: ResilienceContext, timeout: float, signal: Signal) -> Steps:
        """This strategy's deadline ended the call: report `OnTimeout`, call back `on_timeout`.

        The steps' answer is the `TimeoutRejectedError` the deadline aborted `signal` with.
        """
        reason = signal.reason
        assert isinstance(reason, TimeoutRejectedError)
        arguments = OnTimeoutArguments(context, timeout)
        self._telemetry.emit("OnTimeout", Severity.ERROR, operation_key=context.operation_key, arguments=arguments)
        if self._on_timeout is not None:
            yield self._on_timeout, arguments
        yield None, reason

    def execute(self, callback: Callable[[ResilienceContext], T], context: ResilienceContext, /) -> T:
        """Run `callback` with a cooperative deadline (sync)."""
        timeout: float | None = self.timeout
        if self._generator is not None:
            timeout = _generated_timeout(call_back(self._generator, TimeoutGeneratorArguments(context)), self.timeout)
            if timeout is None:
                return callback(context)
        # The child signal is made only when the callable reads it or the deadline fires, and
        # the timer only then (see _LazyDeadline).
        context.raise_if_aborted()  # never start the callable under an aborted signal
        deadline = _LazyDeadline(timeout, self._time)  # type: ignore[arg-type]
        inner = context.derive_scope(deadline=deadline)
        try:
            return callback(inner)
        except Exception as exc:
            if not deadline.expired(inner):
                raise
            reason = run_steps(self._timed_out(context, deadline.timeout, inner.signal))
            if exc is reason:
                raise
            raise reason from exc
        finally:
            deadline.end(inner)
            inner.end_scope()

    async def execute_async(
        self, callback: Callable[[ResilienceContext], Awaitable[T]], context: ResilienceContext, /
    ) -> T:
        """Await `callback` in the caller's task, cancelling it at the deadline (async)."""
        timeout: float | None = self.timeout
        deadlines = self._deadlines
        if self._generator is not None:
            generated = await call_back_async(self._generator, TimeoutGeneratorArguments(context))
            timeout = _generated_timeout(generated, self.timeout)
            if timeout is None:
                return await callback(context)
            deadlines = _Deadlines(timeout, deadlines.clock)
        scope = context.signal.child_scope()
        deadline: _Queued | None = None  # added once the child is adopted: nothing aborts it before
        try:
            async with scope as signal:
                deadline = deadlines.add(signal, scope.loop)
                result = await callback(context.derive(signal=signal))
                deadlines.end(deadline, disarm=deadlines is not self._deadlines)
        except BaseException as exc:
            if deadline is None:  # the caller's signal had aborted: its reason, as it is
                raise
            deadlines.end(deadline, disarm=True)
            if not isinstance(exc, Exception) or not deadline.fired:
                raise
            reason = await run_steps_async(self._timed_out(context, deadline.timeout, signal))
            if exc is reason:
                raise
            raise reason from exc
        return result

    def __repr__(self) -> str:
        return f"<TimeoutStrategy timeout={self.timeout:g}>"
