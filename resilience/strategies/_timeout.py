"""The timeout strategy: a deadline on the inner part of the pipeline, sync or asyncio.

Both modes run the inner part under a derived context with a child signal that a timer on the
time provider aborts at the deadline with a fresh `TimeoutRejectedError` (in a sync execution
the child, and the timer, are made only when something reads the signal or the deadline is
found passed: `_derive_linked` and `_LazyDeadline`).

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

import asyncio
import contextlib
import math
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from resilience._lease._workers import off_timer_thread
from resilience._signal import Signal
from resilience._validation import Duration, Problems, generated_seconds, to_seconds
from resilience.exceptions import TimeoutRejectedError
from resilience.strategies._common import call_back, call_back_async
from resilience.telemetry._event import Severity

if TYPE_CHECKING:
    import datetime as dt
    from collections.abc import Awaitable, Callable, Iterable

    from resilience._context import ResilienceContext
    from resilience._time import TimeProvider, TimerHandle
    from resilience.strategies._base import StrategyBuildContext
    from resilience.telemetry._source import TelemetrySource

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
        return TimeoutStrategy(
            to_seconds(self.timeout),
            time_provider=context.time_provider,
            telemetry=context.telemetry,
            timeout_generator=self.timeout_generator,
            on_timeout=self.on_timeout,
        )


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
    return TimeoutStrategyOptions(
        timeout=timeout, timeout_generator=timeout_generator, on_timeout=on_timeout, name=name
    )


class _Deadline:
    """The timer's target: aborts the scope's signal with a fresh `TimeoutRejectedError`.

    The scope is a signal, or a context whose child signal is made on first read
    (`_derive_linked`): firing then makes it.
    """

    __slots__ = ("error", "scope", "timeout")

    def __init__(self, scope: Signal | ResilienceContext, timeout: float) -> None:
        self.scope = scope
        self.timeout = timeout
        self.error: TimeoutRejectedError | None = None

    @property
    def signal(self) -> Signal:
        """The child signal this deadline aborts."""
        scope = self.scope
        return scope if isinstance(scope, Signal) else scope.signal

    def __call__(self) -> None:
        error = TimeoutRejectedError(timeout=self.timeout)
        self.error = error  # before abort(): whoever sees the reason sees whose it is
        # The signal (and its children) read as aborted at once; the callbacks registered on
        # them are user code, which never runs on the shared timer thread (it would delay
        # every lease and timeout of the process): there they go to the callback pool.
        run = self.signal._abort_deferred(error)
        if run is not None:
            off_timer_thread(run)

    @property
    def fired(self) -> bool:
        """True when the signal aborted because of this deadline (not the caller's abort)."""
        error = self.error
        return error is not None and self.signal.reason is error


class _LazyDeadline(_Deadline):
    """The sync timeout's deadline on its scope's context: no timer until the signal is made.

    Most callables never read their signal, and then nothing can see the abort before the
    callable ends: the deadline is only compared with the clock when an `Exception` ends the
    callable, when the scope ends, and when `_abort_reason` walks past it. The first read of
    the signal (`arm`, from `ResilienceContext._link_signal`) schedules the timer for the time
    left, or fires at once if none is: what anyone observes is what an eager timer gives.
    """

    __slots__ = ("_clock", "_due", "_ended", "_timer")

    def __init__(self, scope: ResilienceContext, timeout: float, clock: TimeProvider) -> None:
        self.scope = scope
        self.timeout = timeout
        self.error = None
        self._clock = clock
        self._due = clock.monotonic() + timeout
        self._timer: TimerHandle | None = None
        self._ended = False

    def arm(self) -> None:
        """The scope's signal was just made: abort it at the deadline (now if it passed)."""
        if self._ended or self.error is not None:
            return  # judged when the scope ended, or firing is what made the signal
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

    def __call__(self) -> None:
        # Fired once: by the timer, or on the calling thread when the clock says it is due
        # (the timer may still be on its way then; its late call must not replace the error).
        if self.error is None:
            _Deadline.__call__(self)

    def passed(self) -> bool:
        """Whether the deadline passed while the scope runs (the caller then fires it)."""
        return not self._ended and self._clock.monotonic() >= self._due

    def expired(self) -> bool:
        """`fired`, after firing a deadline that passed unobserved (an `Exception` ended the call)."""
        if self.error is None and self.passed():
            self()
        return self.fired

    def end(self) -> None:
        """The scope ends: a deadline that passed unobserved aborts the signal now; no timer stays."""
        scope: ResilienceContext = self.scope  # type: ignore[assignment]
        if scope._signal is None and self.error is None and self.passed():
            self()  # a context kept past the scope reads as aborted, as with an eager timer
        self._ended = True
        timer = self._timer
        if timer is not None:
            timer.cancel()


class _AsyncDeadline(Signal):
    """The async timeout's child signal, deadline and cancellation scope, in one object.

    It does what a child signal, a `_Deadline` and `Signal.cancel_scope()` do together, without
    the scope's two coroutines, its callback registration and removal (two more lock round
    trips) and their closures: about 3 us of the 10 us an async timeout cost. Aborting this
    signal, by its deadline, its parent or anyone, cancels the task while the scope is
    active; `exit_*` mirror `CancelScope.__aexit__` (see its docstring).
    """

    __slots__ = ("_active", "_baseline", "_loop", "_requested", "_task", "_thread", "error", "timeout")

    def __init__(self, timeout: float) -> None:
        Signal.__init__(self)
        self.timeout = timeout
        self.error: TimeoutRejectedError | None = None
        self._active = False
        self._requested = False

    def __call__(self) -> None:
        """The timer's target: abort with a fresh `TimeoutRejectedError`."""
        error = TimeoutRejectedError(timeout=self.timeout)
        self.error = error  # before abort(): whoever sees the reason sees whose it is
        self.abort(error)

    @property
    def fired(self) -> bool:
        """True when the signal aborted because of this deadline (not the caller's abort)."""
        error = self.error
        return error is not None and self._reason is error

    def abort(self, reason: BaseException | None = None) -> bool:
        """`Signal.abort`, then cancel the task if the scope is active."""
        if not Signal.abort(self, reason):
            return False
        if self._active:
            if threading.get_ident() == self._thread:
                self._cancel()
            else:
                with contextlib.suppress(RuntimeError):  # the loop closed: nothing left to cancel
                    self._loop.call_soon_threadsafe(self._cancel)
        return True

    def _cancel(self) -> None:
        if self._active and not self._task.done():
            self._requested = True
            self._task.cancel()

    def enter(self) -> None:
        """Start cancelling the current task on abort; raise the reason if aborted already."""
        task = asyncio.current_task()
        if task is None:  # pragma: no cover - asyncio always has a current task here
            msg = "an async timeout must run inside an asyncio task"
            raise RuntimeError(msg)
        self._task = task
        self._loop = task.get_loop()
        self._thread = threading.get_ident()
        self._baseline = task.cancelling()
        self._active = True
        reason = self._reason
        if reason is not None:  # checked after activating: an abort in between still cancels
            self._active = False
            raise reason

    def exit_ok(self) -> bool:
        """The callable returned: stop cancelling; True if a cancellation must be absorbed."""
        self._active = False
        return self._requested

    async def absorb(self) -> None:
        """Absorb our cancellation still pending after a return (see `CancelScope`)."""
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.sleep(0)
        if self._task.uncancel() > self._baseline:
            raise asyncio.CancelledError

    async def exit_error(self, exc: BaseException) -> None:
        """The callable raised `exc`: raise the reason instead if it is our cancellation."""
        self._active = False
        if not self._requested:
            return
        if self._task.uncancel() <= self._baseline and isinstance(exc, asyncio.CancelledError):
            reason = self._reason
            assert reason is not None
            raise reason from None


def _generated_timeout(value: object, default: float) -> float | None:
    """The timeout for one execution from the generator's `value` (None: no timeout)."""
    seconds = generated_seconds(value, default, "timeout_generator", "seconds (float), a timedelta, or None")
    if seconds <= 0 or math.isinf(seconds):
        return None
    return seconds


class TimeoutStrategy:
    """The built timeout strategy."""

    __slots__ = ("_generator", "_on_timeout", "_telemetry", "_time", "timeout")

    def __init__(
        self,
        timeout: float,
        *,
        time_provider: TimeProvider,
        telemetry: TelemetrySource,
        timeout_generator: Callable[[TimeoutGeneratorArguments], object] | None,
        on_timeout: Callable[[OnTimeoutArguments], object] | None,
    ) -> None:
        self.timeout = timeout
        self._time = time_provider
        self._telemetry = telemetry
        self._generator = timeout_generator
        self._on_timeout = on_timeout

    def _timed_out(self, context: ResilienceContext, timeout: float) -> OnTimeoutArguments:
        arguments = OnTimeoutArguments(context, timeout)
        self._telemetry.emit("OnTimeout", Severity.ERROR, operation_key=context.operation_key, arguments=arguments)
        return arguments

    def execute(self, callback: Callable[[ResilienceContext], T], context: ResilienceContext, /) -> T:
        """Run `callback` with a cooperative deadline (sync)."""
        timeout: float | None = self.timeout
        if self._generator is not None:
            generated = call_back(self._generator, TimeoutGeneratorArguments(context))
            timeout = _generated_timeout(generated, self.timeout)
            if timeout is None:
                return callback(context)
        # The child signal is made only when the callable reads it or the deadline fires, and
        # the timer only then (see _LazyDeadline).
        inner = context._derive_linked()
        inner._raise_if_aborted()  # never start the callable under an aborted signal
        deadline = inner._deadline = _LazyDeadline(inner, timeout, self._time)  # type: ignore[arg-type]
        try:
            return callback(inner)
        except Exception as exc:
            if not deadline.expired():
                raise
            reason = inner.signal.reason
            assert isinstance(reason, TimeoutRejectedError)
            if self._on_timeout is not None:
                call_back(self._on_timeout, self._timed_out(context, deadline.timeout))
            else:
                self._timed_out(context, deadline.timeout)
            if exc is reason:
                raise
            raise reason from exc
        finally:
            deadline.end()
            inner._end_signal_scope()

    async def execute_async(
        self, callback: Callable[[ResilienceContext], Awaitable[T]], context: ResilienceContext, /
    ) -> T:
        """Await `callback` in the caller's task, cancelling it at the deadline (async)."""
        timeout: float | None = self.timeout
        if self._generator is not None:
            generated = await call_back_async(self._generator, TimeoutGeneratorArguments(context))
            timeout = _generated_timeout(generated, self.timeout)
            if timeout is None:
                return await callback(context)
        scope = _AsyncDeadline(timeout)  # type: ignore[arg-type]
        context.signal._adopt(scope)
        timer = self._time.call_later(scope.timeout, scope)
        try:
            scope.enter()
            try:
                result = await callback(context.derive(signal=scope))
            except BaseException as exc:
                await scope.exit_error(exc)
                raise
            if scope.exit_ok():
                await scope.absorb()
        except Exception as exc:
            if not scope.fired:
                raise
            reason = scope.reason
            assert isinstance(reason, TimeoutRejectedError)
            if self._on_timeout is not None:
                await call_back_async(self._on_timeout, self._timed_out(context, scope.timeout))
            else:
                self._timed_out(context, scope.timeout)
            if exc is reason:
                raise
            raise reason from exc
        finally:
            timer.cancel()
            scope.detach()
        return result

    def __repr__(self) -> str:
        return f"<TimeoutStrategy timeout={self.timeout:g}>"
