"""The timeout strategy: a deadline on the inner part of the pipeline, sync or asyncio.

Both modes run the inner part under a derived context with a child signal that a timer on the
time provider aborts at the deadline with a fresh `TimeoutRejectedError` (in a sync execution
the child is made only when the callable reads it or the deadline fires: `derive_linked`).

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

import datetime as dt
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from resilience._signal import Signal
from resilience._validation import Duration, Problems, to_seconds
from resilience.exceptions import TimeoutRejectedError, ValidationError
from resilience.strategies._common import call_back, call_back_async
from resilience.telemetry._event import Severity

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Iterable

    from resilience._context import ResilienceContext
    from resilience._time import TimeProvider
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

    The scope is the child signal itself (async), or a context whose child signal is made on
    first read (sync, `derive_linked`): firing then makes it.
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
        self.signal.abort(error)

    @property
    def fired(self) -> bool:
        """True when the signal aborted because of this deadline (not the caller's abort)."""
        error = self.error
        return error is not None and self.signal.reason is error


def _generated_timeout(value: object, default: float) -> float | None:
    """The timeout for one execution from the generator's `value` (None: no timeout)."""
    if value is None:
        return default
    if isinstance(value, dt.timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, int | float) and not isinstance(value, bool):
        seconds = float(value)
    else:
        msg = f"timeout_generator returned {value!r}: return seconds (float), a timedelta, or None"
        raise ValidationError(msg)
    if math.isnan(seconds):
        msg = "timeout_generator returned NaN: return seconds (float), a timedelta, or None"
        raise ValidationError(msg)
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

    def _timed_out(self, context: ResilienceContext, deadline: _Deadline) -> OnTimeoutArguments:
        arguments = OnTimeoutArguments(context, deadline.timeout)
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
        # The child signal is made only when the callable reads it or the deadline fires.
        inner = context.derive_linked()
        inner._raise_if_aborted()  # never start the callable under an aborted signal
        deadline = _Deadline(inner, timeout)  # type: ignore[arg-type]
        timer = self._time.call_later(deadline.timeout, deadline)
        try:
            return callback(inner)
        except Exception as exc:
            if not deadline.fired:
                raise
            reason = inner.signal.reason
            assert isinstance(reason, TimeoutRejectedError)
            if self._on_timeout is not None:
                call_back(self._on_timeout, self._timed_out(context, deadline))
            else:
                self._timed_out(context, deadline)
            if exc is reason:
                raise
            raise reason from exc
        finally:
            timer.cancel()
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
        signal = context.signal.child()
        deadline = _Deadline(signal, timeout)  # type: ignore[arg-type]
        timer = self._time.call_later(deadline.timeout, deadline)
        try:
            async with signal.cancel_scope():
                result = await callback(context.derive(signal=signal))
        except Exception as exc:
            if not deadline.fired:
                raise
            reason = signal.reason
            assert isinstance(reason, TimeoutRejectedError)
            if self._on_timeout is not None:
                await call_back_async(self._on_timeout, self._timed_out(context, deadline))
            else:
                self._timed_out(context, deadline)
            if exc is reason:
                raise
            raise reason from exc
        finally:
            timer.cancel()
            signal.detach()
        return result

    def __repr__(self) -> str:
        return f"<TimeoutStrategy timeout={self.timeout:g}>"
