"""What the built-in strategies share: `handle` rules, callbacks, step generators, waits.

- `Handler` compiles a `handle` option (an exception type, a tuple of types, or a predicate
  over the `Outcome`) plus an optional `handle_result` predicate into two quick checks.
- `call_back` / `call_back_async` run a user callback (awaiting an awaitable in async).
- `run_steps` / `run_steps_async` drive a strategy's `Steps`: the sync and async shells of a
  strategy share what surrounds its user callbacks by driving one generator.
- `wait` / `wait_async` sleep on the time provider and end at once when a signal aborts.
"""

from __future__ import annotations

import inspect
import threading
from typing import TYPE_CHECKING, Any, TypeAlias

from resilience._outcome import Err, Ok, Outcome
from resilience._time import clock_wait
from resilience.exceptions import ValidationError
from resilience.strategies._base import StrategyTraits

if TYPE_CHECKING:
    from collections.abc import Callable, Generator

    from resilience._signal import Signal
    from resilience._time import TimeProvider
    from resilience._validation import Problems

__all__ = [
    "Handle",
    "Handler",
    "Steps",
    "call_back",
    "call_back_async",
    "called_back",
    "check_handle",
    "off_clock",
    "run_steps",
    "run_steps_async",
    "store_traits",
    "wait",
    "wait_async",
]

Handle: TypeAlias = "type[Exception] | tuple[type[Exception], ...] | Callable[[Outcome[Any]], bool] | None"
"""What `handle` accepts: exception type(s), a predicate over the outcome, or None (the default)."""

Steps: TypeAlias = "Generator[tuple[Callable[[Any], object] | None, Any], object, None]"
"""What a strategy's sync and async shells share, as one generator both drive (`run_steps`)."""


def check_handle(problems: Problems, value: object) -> None:
    """Record what is wrong with a `handle` option."""
    if isinstance(value, tuple):
        bad = [item for item in value if not (isinstance(item, type) and issubclass(item, Exception))]
        if bad:
            problems.add("handle", f"a tuple must hold only Exception subclasses, got {bad[0]!r}")
    elif isinstance(value, type) and not issubclass(value, Exception):
        problems.add("handle", f"must be an Exception subclass (BaseExceptions are never handled), got {value!r}")
    elif value is not None and not callable(value):
        problems.add("handle", f"must be an exception type, a tuple of them, or a predicate, got {value!r}")


class Handler:
    """Decides whether an outcome is a handled failure (pure: no I/O, no clock)."""

    __slots__ = ("_exclude", "_predicate", "_result", "_types", "checks_results")

    def __init__(self, handle: Handle, handle_result: Callable[[Any], bool] | None = None) -> None:
        self._types: type[Exception] | tuple[type[Exception], ...] = Exception if handle is None else ()
        self._exclude: type[Exception] | None = ValidationError if handle is None else None
        self._result = handle_result
        self._predicate: Callable[[Outcome[Any]], bool] | None = None
        if isinstance(handle, type | tuple):
            self._types = handle
        elif handle is not None:
            self._predicate = handle  # it sees every outcome; handle_result is ignored
        self.checks_results = self._predicate is not None or self._result is not None
        """False when every result is a success (no need to build an `Outcome` for it)."""

    def error(self, error: Exception, outcome: Outcome[Any] | None = None) -> bool:
        """Whether the exception `error` is handled."""
        predicate = self._predicate
        if predicate is not None:
            return bool(predicate(Err(error) if outcome is None else outcome))
        exclude = self._exclude
        return isinstance(error, self._types) and (exclude is None or not isinstance(error, exclude))

    def result(self, value: Any, outcome: Outcome[Any] | None = None) -> bool:
        """Whether the result `value` is handled (a failure to retry or count)."""
        predicate = self._predicate
        if predicate is not None:
            return bool(predicate(Ok(value) if outcome is None else outcome))
        check = self._result
        return check is not None and bool(check(value))

    def handles(self, outcome: Outcome[Any]) -> bool:
        """Whether `outcome` (an exception or a result) is handled."""
        error = outcome.error
        return self.result(outcome.value, outcome) if error is None else self.error(error, outcome)


def store_traits(what: str, *, has_sync: bool, has_async: bool, example: str) -> StrategyTraits:
    """The traits of a strategy over a store: the flavour of execution the store cannot serve, refused.

    `what` names the store in the messages ("Lock: the lock store <...>"); `example` is its class.
    """
    sync_problem = async_problem = None
    if not has_sync:
        sync_problem = (
            f"{what} has no sync client: run this pipeline with execute_async/settle_async, "
            f"or give the store a sync client (e.g. {example}(redis.Redis(...)))"
        )
    if not has_async:
        async_problem = (
            f"{what} has no asyncio client: run this pipeline with execute/settle, "
            f"or give the store an async client (e.g. {example}(async_client=redis.asyncio.Redis(...)))"
        )
    return StrategyTraits(sync_problem=sync_problem, async_problem=async_problem, hands_on_context=True)


def off_clock(store_class: str, why: str, or_else: str = " or leave store=None") -> str:
    """The problem of an in-memory store made on another clock than the pipeline's (`why`: what runs on it)."""
    return (
        f"a {store_class} must use the pipeline's time provider ({why}): "
        f"create it with {store_class}(time_provider){or_else}"
    )


def call_back(callback: Callable[[Any], object], arguments: object) -> object:
    """Run a user callback in a sync execution and return its result (an awaitable is refused)."""
    return called_back(callback, callback(arguments))


def called_back(callback: Callable[[Any], object], result: object) -> object:
    """What a user callback returned in a sync execution: `result`, unless it is an awaitable (refused)."""
    if inspect.isawaitable(result):
        close = getattr(result, "close", None)
        if callable(close):
            close()
        msg = f"{getattr(callback, '__qualname__', callback)!r} returned an awaitable in a sync execution"
        raise ValidationError(msg + ": use a plain callback, or run the pipeline with execute_async")
    return result


async def call_back_async(callback: Callable[[Any], object], arguments: object) -> object:
    """Run a user callback in an async execution and return its result, awaited if awaitable."""
    result = callback(arguments)
    return await result if inspect.isawaitable(result) else result


def run_steps(steps: Steps) -> Any:
    """Drive `steps` in a sync execution; return their answer.

    The steps yield `(callback, arguments)` for each user callback (called here, its result
    sent back), then `(None, answer)`. A callback that raises closes the steps (their `finally`
    blocks run) before it propagates; it is never thrown into the steps, so an `except` around
    a `yield` does not see it. The steps are left at their last yield once answered: write it
    outside any `try` or `with`. (Not the stores' `run_steps`, which drives client calls.)
    """
    hook, value = next(steps)
    try:
        while hook is not None:
            hook, value = steps.send(call_back(hook, value))
    except BaseException:
        steps.close()
        raise
    return value


async def run_steps_async(steps: Steps) -> Any:
    """Drive `steps` in an async execution (a callback's awaitable is awaited); their answer."""
    hook, value = next(steps)
    try:
        while hook is not None:
            hook, value = steps.send(await call_back_async(hook, value))
    except BaseException:
        steps.close()
        raise
    return value


def wait(time_provider: TimeProvider, seconds: float, signal: Signal) -> bool:
    """Sleep `seconds` on the provider's clock; return True (at once) if `signal` aborts."""
    if signal.aborted:
        return True
    if seconds <= 0:
        return False
    woken = threading.Event()
    remove = signal.add_wakeup(lambda _reason: woken.set())
    try:
        clock_wait(time_provider, woken, seconds)
    finally:
        remove()
    return signal.aborted


async def wait_async(time_provider: TimeProvider, seconds: float, signal: Signal) -> bool:
    """Suspend `seconds` on the provider's clock; return True (at once) if `signal` aborts."""
    if signal.aborted:
        return True
    if seconds <= 0:
        return False
    try:
        async with signal.cancel_scope():
            await time_provider.sleep_async(seconds)
    except BaseException as exc:
        if exc is not signal.reason:
            raise
        return True
    return signal.aborted
