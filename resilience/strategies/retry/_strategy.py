"""The retry strategy: options, arguments, and the sync and async shells over `RetryCore`.

Each attempt runs under `context.derive_scope(attempt=n)`: a derived context whose child
signal is made on first read. Between attempts the shell sleeps on the time provider; the sleep
ends at once when the caller's signal aborts, and then no further attempt is made (the last
outcome is returned or re-raised).
"""

from __future__ import annotations

import contextlib
import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from resilience._outcome import Err, Ok, Outcome
from resilience._validation import Duration, Problems, to_seconds
from resilience.strategies._base import HANDS_ON
from resilience.strategies._common import (
    Handle,
    Handler,
    Steps,
    check_handle,
    run_steps,
    run_steps_async,
    wait,
    wait_async,
)
from resilience.strategies.retry._core import Backoff, RetryCore
from resilience.telemetry._event import Severity

if TYPE_CHECKING:
    import datetime as dt
    from collections.abc import Awaitable, Callable, Iterable

    from resilience._context import ResilienceContext
    from resilience.strategies._base import StrategyBuildContext
    from resilience.telemetry._source import TelemetrySource

__all__ = [
    "ExecutionAttemptArguments",
    "OnRetryArguments",
    "RetryDelayArguments",
    "RetryStrategy",
    "RetryStrategyOptions",
    "retry_strategy",
]

T = TypeVar("T")
_BACKOFFS = ("constant", "linear", "exponential")


@dataclass(frozen=True, slots=True)
class ExecutionAttemptArguments:
    """Arguments of the `ExecutionAttempt` event: 0-based `attempt`, its `duration`, `handled`."""

    attempt: int
    duration: float
    handled: bool


@dataclass(frozen=True, slots=True)
class OnRetryArguments:
    """What `on_retry` receives before the delay: the failed `attempt` (0-based) and its outcome."""

    outcome: Outcome[Any]
    context: ResilienceContext
    attempt: int
    delay: float
    """The delay before the next attempt, in seconds."""
    duration: float
    """How long the failed attempt took, in seconds."""


@dataclass(frozen=True, slots=True)
class RetryDelayArguments:
    """What `delay_generator` receives: the failed attempt and the backoff delay it would get."""

    outcome: Outcome[Any]
    context: ResilienceContext
    attempt: int
    backoff_delay: float


@dataclass(frozen=True, slots=True, kw_only=True)
class RetryStrategyOptions:
    """Options of the retry strategy (`retry_strategy(...)`); validated at `build()`."""

    max_retries: int = 3
    delay: Duration = 2.0
    backoff: Backoff = "constant"
    jitter: bool = False
    max_delay: Duration | None = None
    handle: Handle = None
    handle_result: Callable[[Any], bool] | None = None
    delay_generator: Callable[[RetryDelayArguments], float | dt.timedelta | None] | None = None
    on_retry: Callable[[OnRetryArguments], object] | None = None
    name: str = "Retry"

    def validate(self, context: StrategyBuildContext, /) -> Iterable[str]:  # noqa: ARG002 - protocol
        """Every problem with these options, as `"<option>: <what>"`."""
        problems = Problems()
        problems.integer("max_retries", self.max_retries, minimum=0)
        problems.duration("delay", self.delay)
        problems.duration("max_delay", self.max_delay, allow_none=True)
        backoff: object = self.backoff
        if not isinstance(backoff, str) or backoff not in _BACKOFFS:
            problems.add("backoff", f"must be one of {', '.join(map(repr, _BACKOFFS))}, got {backoff!r}")
        problems.boolean("jitter", self.jitter)
        check_handle(problems, self.handle)
        problems.callable("handle_result", self.handle_result)
        problems.callable("delay_generator", self.delay_generator)
        problems.callable("on_retry", self.on_retry)
        problems.name("name", self.name)
        return problems.items

    def create(
        self, context: StrategyBuildContext, /, *, time_left: Callable[[], float | None] | None = None
    ) -> RetryStrategy:
        """A retry strategy for one built pipeline (`time_left`: see `RetryStrategy`)."""
        return RetryStrategy(self, context, time_left)


def retry_strategy(
    *,
    max_retries: int = 3,
    delay: Duration = 2.0,
    backoff: Backoff = "constant",
    jitter: bool = False,
    max_delay: Duration | None = None,
    handle: Handle = None,
    handle_result: Callable[[Any], bool] | None = None,
    delay_generator: Callable[[RetryDelayArguments], float | dt.timedelta | None] | None = None,
    on_retry: Callable[[OnRetryArguments], object] | None = None,
    name: str = "Retry",
) -> RetryStrategyOptions:
    """Retry handled failures up to `max_retries` times after the first call (Polly's retry).

    `handle` is an exception type, a tuple of types, or a predicate over the `Outcome` (then
    `handle_result` is ignored); by default every `Exception` except `ValidationError`.
    `handle_result(value)` makes results retryable too (the last one is returned when retries
    run out). Delays: `backoff` over `delay`, `jitter`, capped by `max_delay`;
    `delay_generator` may override each one (None keeps the backoff).
    """
    return RetryStrategyOptions(**locals())


class RetryStrategy:
    """The built retry strategy: performs `RetryCore`'s decisions, sync or async."""

    traits = HANDS_ON

    __slots__ = (
        "_core",
        "_measured",
        "_options",
        "_telemetry",
        "_time",
        "_time_left",
        "_traced",
    )

    def __init__(
        self,
        options: RetryStrategyOptions,
        context: StrategyBuildContext,
        time_left: Callable[[], float | None] | None = None,
    ) -> None:
        """`time_left()`: seconds before a deadline no wait may reach (None: none).

        A delay that reaches it ends the retries at once with the last outcome, untouched by
        `on_retry`.
        """
        self._core = RetryCore(
            max_retries=options.max_retries,
            delay=to_seconds(options.delay),
            backoff=options.backoff,
            jitter=options.jitter,
            max_delay=None if options.max_delay is None else to_seconds(options.max_delay),
            handler=Handler(options.handle, options.handle_result),
            random=context.time_provider.random(),
        )
        self._time = context.time_provider
        self._telemetry = context.telemetry
        self._options = options
        self._time_left = time_left
        telemetry = context.telemetry.options
        # Attempt durations are measured only when someone may read them.
        self._measured = bool(telemetry.listeners or telemetry.severity_provider or options.on_retry)
        self._traced = telemetry.trace_executions

    def _succeeded(self, context: ResilienceContext, result: object, attempt: int, duration: float) -> None:
        """Report a successful attempt (its signal is not read: nothing is retried)."""
        self._telemetry.emit(
            "ExecutionAttempt",
            Severity.INFORMATION,
            operation_key=context.operation_key,
            outcome=Ok(result),
            arguments=ExecutionAttemptArguments(attempt, duration, False),  # noqa: FBT003 - positional field
        )

    def _failed(
        self,
        context: ResilienceContext,
        inner: ResilienceContext,
        outcome: Outcome[Any],
        started: float | None,
        state: float,
    ) -> Steps:
        """What follows a failed attempt, for both shells: report it, decide, run the callbacks.

        The steps' answer is None: stop, or `(delay, state)`: retry after `delay` seconds with
        the jitter state `state`. Only failures pay for a generator.
        """
        core = self._core
        attempt = inner.attempt
        error = outcome.error
        handled = error is None or core.handler.error(error, outcome)  # an Ok here is a handled result
        duration = 0.0 if started is None else self._time.monotonic() - started
        retry = core.should_retry(handled=handled, attempt=attempt, aborted=context.signal.aborted)
        delay = 0.0
        if retry:
            delay, state = core.backoff_delay(attempt, state)
            if self._options.delay_generator is not None:
                generated = yield self._options.delay_generator, RetryDelayArguments(outcome, inner, attempt, delay)
                delay = core.generated_delay(generated, delay)
            if self._time_left is not None:  # a delay that outlasts the deadline: the outcome now
                left = self._time_left()
                retry = left is None or delay < left
        severity = Severity.WARNING if retry else Severity.ERROR if handled else Severity.INFORMATION
        arguments: Any = ExecutionAttemptArguments(attempt, duration, handled)
        self._telemetry.emit(
            "ExecutionAttempt", severity, operation_key=context.operation_key, outcome=outcome, arguments=arguments
        )
        if retry:
            arguments = OnRetryArguments(outcome, inner, attempt, delay, duration)
            self._telemetry.emit(
                "OnRetry", Severity.WARNING, operation_key=inner.operation_key, outcome=outcome, arguments=arguments
            )
            if self._options.on_retry is not None:
                yield self._options.on_retry, arguments
            yield None, (delay, state)
        yield None, None

    def execute(self, callback: Callable[[ResilienceContext], T], context: ResilienceContext, /) -> T:
        """Call `callback` until it succeeds, is not handled, or retries run out (sync)."""
        call = functools.partial(_in_span, self._telemetry, callback) if self._traced else callback
        context.raise_if_aborted()  # never start the callable under an aborted signal
        # Durations are read only when an attempt's event or on_retry can see them. A quiet
        # execution (`ResilienceContext.quiet`) skips the checks: a success reports
        # nothing, and the clock costs less than asking whether a failure would be heard.
        quiet = context.quiet
        measured = quiet or self._measured or self._telemetry.enabled(Severity.WARNING)
        handler, clock, attempt, state = self._core.handler, self._time, 0, 0.0
        while True:
            inner = context.derive_scope(attempt=attempt)  # its child signal is made if read
            started = clock.monotonic() if measured else None
            try:
                result = call(inner)
            except Exception as exc:  # noqa: BLE001 - BaseExceptions pass through untouched
                outcome: Outcome[Any] = Err(exc)
            else:  # a success (an unhandled result) returns, reported only if someone hears it
                if not (handler.checks_results and handler.result(result, outcome := Ok(result))):
                    if not quiet and started is not None:
                        self._succeeded(context, result, attempt, clock.monotonic() - started)
                    return result
            finally:
                inner.end_scope()
            arguments = run_steps(self._failed(context, inner, outcome, started, state))
            if arguments is None or wait(clock, arguments[0], context.signal):
                return outcome.unwrap()  # type: ignore[no-any-return]
            state = arguments[1]
            attempt += 1

    async def execute_async(
        self, callback: Callable[[ResilienceContext], Awaitable[T]], context: ResilienceContext, /
    ) -> T:
        """Await `callback` until it succeeds, is not handled, or retries run out (async)."""
        call = functools.partial(_in_span_async, self._telemetry, callback) if self._traced else callback
        context.raise_if_aborted()  # never start the callable under an aborted signal
        quiet = context.quiet  # durations are measured as in `execute`
        measured = quiet or self._measured or self._telemetry.enabled(Severity.WARNING)
        handler, clock, attempt, state = self._core.handler, self._time, 0, 0.0
        while True:
            inner = context.derive_scope(attempt=attempt)
            started = clock.monotonic() if measured else None
            try:
                result = await call(inner)
            except Exception as exc:  # noqa: BLE001 - BaseExceptions pass through untouched
                outcome: Outcome[Any] = Err(exc)
            else:
                if not (handler.checks_results and handler.result(result, outcome := Ok(result))):
                    if not quiet and started is not None:
                        self._succeeded(context, result, attempt, clock.monotonic() - started)
                    return result
            finally:
                inner.end_scope()
            arguments = await run_steps_async(self._failed(context, inner, outcome, started, state))
            if arguments is None or await wait_async(clock, arguments[0], context.signal):
                return outcome.unwrap()  # type: ignore[no-any-return]
            state = arguments[1]
            attempt += 1

    def __repr__(self) -> str:
        return f"<RetryStrategy max_retries={self._core.max_retries}>"


def _in_span(telemetry: TelemetrySource, callback: Callable[[ResilienceContext], T], inner: ResilienceContext) -> T:
    """Run one attempt in a child span (`TelemetryOptions(trace_executions=True)`)."""
    span = telemetry.span("resilience.attempt", inner.attempt)
    with contextlib.nullcontext() if span is None else span:
        return callback(inner)


async def _in_span_async(
    telemetry: TelemetrySource, callback: Callable[[ResilienceContext], Awaitable[T]], inner: ResilienceContext
) -> T:
    """Await one attempt in a child span (`TelemetryOptions(trace_executions=True)`)."""
    span = telemetry.span("resilience.attempt", inner.attempt)
    with contextlib.nullcontext() if span is None else span:
        return await callback(inner)
