"""The fallback strategy: a substitute value when the inner part ends with a handled outcome.

There is one decision (is this outcome handled, and may a fallback still run?), made by the
shared `Handler`; the two hooks only call the inner part and, on a handled outcome, report
`OnFallback`, call `on_fallback` and return what `fallback(args)` returns (or raise what it
raises). The fallback runs as the strategy's context's code: `get_context()` inside it is that
context, so a nested execution derives from it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from resilience._context import reset_context, set_context
from resilience._outcome import Err, Ok, Outcome
from resilience._validation import Problems
from resilience.strategies._base import HANDS_ON
from resilience.strategies._common import Handle, Handler, Steps, check_handle, run_steps, run_steps_async
from resilience.telemetry._event import Severity

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Iterable

    from resilience._context import ResilienceContext
    from resilience.strategies._base import StrategyBuildContext

__all__ = [
    "FallbackArguments",
    "FallbackStrategy",
    "FallbackStrategyOptions",
    "OnFallbackArguments",
    "fallback_strategy",
]

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class FallbackArguments:
    """What `fallback` receives: the handled outcome and the strategy's context."""

    outcome: Outcome[Any]
    context: ResilienceContext


@dataclass(frozen=True, slots=True)
class OnFallbackArguments:
    """What `on_fallback` (and the `OnFallback` event) receives, before the fallback runs."""

    outcome: Outcome[Any]
    context: ResilienceContext


@dataclass(frozen=True, slots=True)
class FallbackStrategyOptions:
    """Options of the fallback strategy (`fallback_strategy(...)`); validated at `build()`."""

    fallback: Callable[[FallbackArguments], Any]
    handle: Handle = None
    handle_result: Callable[[Any], bool] | None = None
    on_fallback: Callable[[OnFallbackArguments], object] | None = None
    name: str = "Fallback"

    def validate(self, context: StrategyBuildContext, /) -> Iterable[str]:  # noqa: ARG002 - protocol
        """Every problem with these options, as `"<option>: <what>"`."""
        problems = Problems()
        problems.callable("fallback", self.fallback, allow_none=False)
        check_handle(problems, self.handle)
        problems.callable("handle_result", self.handle_result)
        problems.callable("on_fallback", self.on_fallback)
        problems.name("name", self.name)
        return problems.items

    def create(self, context: StrategyBuildContext, /) -> FallbackStrategy:
        """A fallback strategy for one built pipeline."""
        return FallbackStrategy(self, context)


def fallback_strategy(
    fallback: Callable[[FallbackArguments], Any],
    /,
    *,
    handle: Handle = None,
    handle_result: Callable[[Any], bool] | None = None,
    on_fallback: Callable[[OnFallbackArguments], object] | None = None,
    name: str = "Fallback",
) -> FallbackStrategyOptions:
    """Replace a handled outcome of the inner part with what `fallback(args)` returns (Polly's fallback).

    `handle` and `handle_result` work as in `retry_strategy` (by default every `Exception`
    except `ValidationError`, and no result). `fallback` gets a `FallbackArguments(outcome,
    context)` and returns the substitute value or raises; in an async execution it may return
    an awaitable, which is awaited. `on_fallback` and the `OnFallback` event come first. A
    `BaseException` that is not an `Exception` (cancellation, interrupts) is never handled, and
    no fallback runs once the caller's signal has aborted.
    """
    return FallbackStrategyOptions(**locals())


class FallbackStrategy:
    """The built fallback strategy."""

    traits = HANDS_ON

    __slots__ = ("_checks_results", "_fallback", "_handler", "_on_fallback", "_telemetry")

    def __init__(self, options: FallbackStrategyOptions, context: StrategyBuildContext) -> None:
        self._fallback = options.fallback
        self._handler = handler = Handler(options.handle, options.handle_result)
        self._checks_results = handler.checks_results  # False: every result passes through
        self._telemetry = context.telemetry
        self._on_fallback = options.on_fallback

    def _handles(self, outcome: Outcome[Any], context: ResilienceContext) -> bool:
        """Whether to fall back from `outcome`: handled, and the caller has not aborted us."""
        # Once the caller gave up, its abort (or what it caused) is the answer.
        return context.abort_reason is None and self._handler.handles(outcome)

    def _substitute(self, outcome: Outcome[Any], context: ResilienceContext) -> Steps:
        """Report `OnFallback`, then call back `on_fallback` and the fallback; the answer is the fallback's value.

        While they run, the strategy's context is the ambient one (a nested execution derives from it).
        """
        arguments = OnFallbackArguments(outcome, context)
        self._telemetry.emit(
            "OnFallback", Severity.WARNING, operation_key=context.operation_key, outcome=outcome, arguments=arguments
        )
        token = set_context(context)
        try:
            if self._on_fallback is not None:
                yield self._on_fallback, arguments
            value = yield self._fallback, FallbackArguments(outcome, context)
        finally:
            reset_context(token)
        yield None, value

    def execute(self, callback: Callable[[ResilienceContext], T], context: ResilienceContext, /) -> T:
        """Call the inner part; on a handled outcome return the fallback's value (sync)."""
        try:
            result = callback(context)
        except Exception as exc:
            failure = Err(exc)
            if not self._handles(failure, context):
                raise
            # Inside the except block: an exception from the fallback keeps this one as context.
            return run_steps(self._substitute(failure, context))  # type: ignore[no-any-return]
        if self._checks_results and self._handles(outcome := Ok(result), context):
            return run_steps(self._substitute(outcome, context))  # type: ignore[no-any-return]
        return result

    async def execute_async(
        self, callback: Callable[[ResilienceContext], Awaitable[T]], context: ResilienceContext, /
    ) -> T:
        """Await the inner part; on a handled outcome return the fallback's value (async)."""
        try:
            result = await callback(context)
        except Exception as exc:
            failure = Err(exc)
            if not self._handles(failure, context):
                raise
            return await run_steps_async(self._substitute(failure, context))  # type: ignore[no-any-return]
        if self._checks_results and self._handles(outcome := Ok(result), context):
            return await run_steps_async(self._substitute(outcome, context))  # type: ignore[no-any-return]
        return result

    def __repr__(self) -> str:
        return f"<FallbackStrategy fallback={getattr(self._fallback, '__qualname__', self._fallback)!r}>"
