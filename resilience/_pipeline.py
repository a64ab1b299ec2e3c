"""`ResiliencePipeline`: runs a callable through the built strategies, sync or asyncio.

The first strategy added is the outermost. Per execution the pipeline derives a context from
the ambient one, chains the strategies' hooks with `functools.partial`, and makes the context
the callable runs under the ambient one (`get_context()`).
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import sys
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar, overload

from resilience._context import _CURRENT, ResilienceContext
from resilience._outcome import Err, Ok, Outcome
from resilience.exceptions import ValidationError
from resilience.telemetry import _otel
from resilience.telemetry._event import Severity
from resilience.telemetry._source import CAPTURES, LOGGER, TelemetrySource

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Coroutine, Sequence

    from resilience._time import TimeProvider
    from resilience.strategies._base import Strategy

__all__ = ["PipelineExecutedArguments", "ResiliencePipeline"]

P = ParamSpec("P")
T = TypeVar("T")

# Information is the higher of the two pipeline events' levels: if the logger would drop it
# and nobody else listens, neither event is produced.
_INFO = Severity.INFORMATION.log_level
_new_object = object.__new__
# Until some code imports OpenTelemetry no SDK can be installed: one dictionary lookup tells.
_MODULES = sys.modules
_OTEL = "opentelemetry"


class PipelineExecutedArguments:
    """Arguments of the `PipelineExecuted` event: how long the execution took, in seconds."""

    __slots__ = ("duration",)

    def __init__(self, duration: float) -> None:
        self.duration = duration

    def __repr__(self) -> str:
        return f"PipelineExecutedArguments(duration={self.duration!r})"


_PLAIN_TYPES: set[type] = {type(None), int, float, str, bytes, bool, dict, list, tuple}


def _is_awaitable(value: object) -> bool:
    # A failed attribute lookup costs a few hundred nanoseconds (it raises inside), so result
    # types known not to be awaitable are remembered (a bounded set of classes).
    kind = type(value)
    if kind in _PLAIN_TYPES:
        return False
    if hasattr(kind, "__await__"):
        return True
    if len(_PLAIN_TYPES) < 4096:
        _PLAIN_TYPES.add(kind)
    return False


def _refuse_awaitable(fn: object, result: object) -> ValidationError:
    close = getattr(result, "close", None)
    if callable(close):
        close()  # no "coroutine was never awaited" warning on top of our error
    elif callable(cancel := getattr(result, "cancel", None)):
        cancel()  # a future or task nobody will await
    return ValidationError(
        f"{_name_of(fn)} returned an awaitable in a sync execution: use execute_async/settle_async "
        "(or decorate an async function) to await it"
    )


def _refuse_non_awaitable(fn: object, result: object) -> ValidationError:
    return ValidationError(
        f"{_name_of(fn)} returned {type(result).__name__}, not an awaitable, in an async execution: "
        "use execute/settle for a sync callable"
    )


def _name_of(fn: object) -> str:
    return getattr(fn, "__qualname__", None) or repr(fn)


def is_async_callable(fn: object) -> bool:
    """True for coroutine functions, partials of them, and objects with an `async __call__`."""
    while isinstance(fn, functools.partial):
        fn = fn.func
    if inspect.iscoroutinefunction(fn):
        return True
    call = getattr(fn, "__call__", None)  # noqa: B004 - the method itself is what we inspect
    return call is not None and inspect.iscoroutinefunction(call)


class _Plan:
    """What a pipeline runs: its strategies and the misuse they refuse, swapped as one reference.

    An execution reads `pipeline._plan` once, so a registry's `reload` (one attribute write)
    never shows it half of one configuration and half of another, and needs no lock.
    """

    __slots__ = ("async_problem", "strategies", "sync_problem")

    def __init__(self, strategies: tuple[Strategy, ...]) -> None:
        self.strategies = strategies
        self.sync_problem: str | None = next((p for s in strategies if (p := getattr(s, "sync_problem", None))), None)
        self.async_problem: str | None = next((p for s in strategies if (p := getattr(s, "async_problem", None))), None)


class ResiliencePipeline:
    """A built pipeline: `execute`/`settle` a callable through its strategies, or decorate one.

    One pipeline serves sync and asyncio callers at once; strategy state (a circuit) is shared
    between them.
    """

    __slots__ = (
        "_listened",
        "_plan",
        "_source",
        "instance_name",
        "name",
        "time_provider",
    )

    def __init__(
        self,
        strategies: Sequence[Strategy],
        *,
        name: str | None,
        instance_name: str | None,
        time_provider: TimeProvider,
        telemetry: TelemetrySource,
    ) -> None:
        self._plan = _Plan(tuple(strategies))
        self.name = name
        self.instance_name = instance_name
        self.time_provider = time_provider
        self._source = telemetry
        options = telemetry.options
        self._listened = bool(
            options.listeners
            or options.severity_provider
            or options.trace_executions
            or options.meter_provider is not None
            or options.tracer_provider is not None
        )

    @property
    def strategies(self) -> tuple[Strategy, ...]:
        """The built strategies, outermost first."""
        return self._plan.strategies

    def _executing(self, context: ResilienceContext) -> float:
        self._source.emit("PipelineExecuting", Severity.DEBUG, operation_key=context.operation_key)
        return self.time_provider.monotonic()

    def _executed(self, context: ResilienceContext, started: float, outcome: Outcome[Any]) -> None:
        duration = self.time_provider.monotonic() - started
        self._source.emit(
            "PipelineExecuted",
            Severity.INFORMATION,
            operation_key=context.operation_key,
            outcome=outcome,
            arguments=PipelineExecutedArguments(duration),
        )

    # -- sync ---------------------------------------------------------------------------------

    def execute(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
        """Run `fn(*args, **kwargs)` through the pipeline and return its result (or raise)."""
        plan = self._plan  # read once: a reload swaps it for the executions that start later
        if plan.sync_problem is not None:
            raise ValidationError(plan.sync_problem)
        parent = _CURRENT.get()
        # The execution shares its caller's signal: nothing aborts an execution on its own,
        # and the strategies that can abort (timeout, lock) derive child signals.
        context = _new_object(ResilienceContext) if parent is None else parent.derive()
        if (
            self._listened
            or LOGGER.isEnabledFor(_INFO)
            or CAPTURES.listeners
            or (_OTEL in _MODULES and self._otel_active())
        ):
            return self._execute_observed(plan.strategies, context, fn, args, kwargs)
        if plan.strategies:
            return self._run(plan.strategies, context, fn, args, kwargs)
        # No strategy and nobody listening: the whole execution inline (what "overhead" measures).
        if parent is not None:
            parent._raise_if_aborted()
        token = _CURRENT.set(context)
        try:
            result = fn(*args, **kwargs)
        finally:
            _CURRENT.reset(token)
        if type(result) not in _PLAIN_TYPES and _is_awaitable(result):
            raise _refuse_awaitable(fn, result)
        return result

    def _otel_active(self) -> bool:
        return _otel.is_active(self._source.options)

    def _span(self, context: ResilienceContext) -> Any:
        """The execution span's context manager when `trace_executions` is on and a tracer records."""
        options = self._source.options
        tracer = _otel.tracer(options) if options.trace_executions else None
        if tracer is None:
            return contextlib.nullcontext()
        attributes: dict[str, str] = {}
        if self.name is not None:
            attributes["pipeline.name"] = self.name
        if self.instance_name is not None:
            attributes["pipeline.instance"] = self.instance_name
        if context.operation_key is not None:
            attributes["operation.key"] = context.operation_key
        return tracer.start_as_current_span("resilience.pipeline.execute", attributes=attributes)

    def _execute_observed(
        self, strategies: tuple[Strategy, ...], context: ResilienceContext, fn: Callable[..., T], args: Any, kwargs: Any
    ) -> T:
        with self._span(context):
            return self._observe(strategies, context, fn, args, kwargs)

    def _observe(
        self, strategies: tuple[Strategy, ...], context: ResilienceContext, fn: Callable[..., T], args: Any, kwargs: Any
    ) -> T:
        started = self._executing(context)
        try:
            result = self._run(strategies, context, fn, args, kwargs)
        except Exception as exc:
            self._executed(context, started, Err(exc))
            raise
        self._executed(context, started, Ok(result))
        return result

    def _run(
        self, strategies: tuple[Strategy, ...], context: ResilienceContext, fn: Callable[..., T], args: Any, kwargs: Any
    ) -> T:
        def call(inner: ResilienceContext) -> T:
            inner._raise_if_aborted()  # DESIGN §2.3: never start the callable under an aborted signal
            token = _CURRENT.set(inner)
            try:
                result = fn(*args, **kwargs)
            finally:
                _CURRENT.reset(token)
            if type(result) not in _PLAIN_TYPES and _is_awaitable(result):
                raise _refuse_awaitable(fn, result)
            return result

        chain: Callable[[ResilienceContext], T] = call
        for strategy in reversed(strategies):
            chain = functools.partial(strategy.execute, chain)
        return chain(context)

    def settle(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> Ok[T] | Err:
        """Like `execute`, but return an `Outcome` (`Ok` or `Err`) instead of raising an `Exception`.

        `KeyboardInterrupt`, `SystemExit` and other `BaseException`s still propagate.
        """
        try:
            return Ok(self.execute(fn, *args, **kwargs))
        except Exception as exc:  # noqa: BLE001 - settling every Exception is the point
            return Err(exc)

    # -- async --------------------------------------------------------------------------------

    async def execute_async(self, fn: Callable[P, Awaitable[T]], /, *args: P.args, **kwargs: P.kwargs) -> T:
        """Await `fn(*args, **kwargs)` through the pipeline and return its result (or raise)."""
        plan = self._plan  # read once: a reload swaps it for the executions that start later
        if plan.async_problem is not None:
            raise ValidationError(plan.async_problem)
        parent = _CURRENT.get()
        context = _new_object(ResilienceContext) if parent is None else parent.derive()
        if (
            self._listened
            or LOGGER.isEnabledFor(_INFO)
            or CAPTURES.listeners
            or (_OTEL in _MODULES and self._otel_active())
        ):
            return await self._execute_observed_async(plan.strategies, context, fn, args, kwargs)
        if plan.strategies:
            return await self._run_async(plan.strategies, context, fn, args, kwargs)
        if parent is not None:
            parent._raise_if_aborted()
        token = _CURRENT.set(context)
        try:
            awaitable = fn(*args, **kwargs)
            if not _is_awaitable(awaitable):
                raise _refuse_non_awaitable(fn, awaitable)
            return await awaitable
        finally:
            _CURRENT.reset(token)

    async def _execute_observed_async(
        self,
        strategies: tuple[Strategy, ...],
        context: ResilienceContext,
        fn: Callable[..., Awaitable[T]],
        args: Any,
        kwargs: Any,
    ) -> T:
        with self._span(context):
            return await self._observe_async(strategies, context, fn, args, kwargs)

    async def _observe_async(
        self,
        strategies: tuple[Strategy, ...],
        context: ResilienceContext,
        fn: Callable[..., Awaitable[T]],
        args: Any,
        kwargs: Any,
    ) -> T:
        started = self._executing(context)
        try:
            result = await self._run_async(strategies, context, fn, args, kwargs)
        except Exception as exc:
            self._executed(context, started, Err(exc))
            raise
        self._executed(context, started, Ok(result))
        return result

    def _run_async(
        self,
        strategies: tuple[Strategy, ...],
        context: ResilienceContext,
        fn: Callable[..., Awaitable[T]],
        args: Any,
        kwargs: Any,
    ) -> Awaitable[T]:
        async def call(inner: ResilienceContext) -> T:
            inner._raise_if_aborted()  # DESIGN §2.3: never start the callable under an aborted signal
            token = _CURRENT.set(inner)
            try:
                awaitable = fn(*args, **kwargs)
                if not _is_awaitable(awaitable):
                    raise _refuse_non_awaitable(fn, awaitable)
                return await awaitable
            finally:
                _CURRENT.reset(token)

        chain: Callable[[ResilienceContext], Awaitable[T]] = call
        for strategy in reversed(strategies):
            chain = functools.partial(strategy.execute_async, chain)
        return chain(context)

    async def settle_async(self, fn: Callable[P, Awaitable[T]], /, *args: P.args, **kwargs: P.kwargs) -> Ok[T] | Err:
        """Like `execute_async`, but return an `Outcome` instead of raising an `Exception`."""
        try:
            return Ok(await self.execute_async(fn, *args, **kwargs))
        except Exception as exc:  # noqa: BLE001 - settling every Exception is the point
            return Err(exc)

    # -- decorator ----------------------------------------------------------------------------

    @overload
    def __call__(self, fn: Callable[P, Coroutine[Any, Any, T]], /) -> Callable[P, Coroutine[Any, Any, T]]: ...
    @overload
    def __call__(self, fn: Callable[P, T], /) -> Callable[P, T]: ...
    def __call__(self, fn: Callable[P, Any], /) -> Callable[P, Any]:
        """Decorate a function (sync or async) so that every call runs through the pipeline."""
        if inspect.isgeneratorfunction(fn) or inspect.isasyncgenfunction(fn):
            msg = (
                f"{_name_of(fn)} is a generator function: a pipeline runs a call to completion; "
                "decorate a function that returns (or awaits) a value instead"
            )
            raise ValidationError(msg)
        if is_async_callable(fn):

            async def run_async(*args: P.args, **kwargs: P.kwargs) -> Any:
                return await self.execute_async(fn, *args, **kwargs)

            return functools.update_wrapper(run_async, fn)

        def run(*args: P.args, **kwargs: P.kwargs) -> Any:
            return self.execute(fn, *args, **kwargs)

        return functools.update_wrapper(run, fn)

    def _adopt(self, other: ResiliencePipeline) -> None:
        """Run `other`'s strategies from now on (the registry's reload; same name and telemetry).

        One reference write: executions already running keep the plan they read.
        """
        self._plan = other._plan

    def __repr__(self) -> str:
        names = ", ".join(type(s).__name__ for s in self._plan.strategies)
        return f"<ResiliencePipeline name={self.name!r} strategies=[{names}]>"
