"""`ResiliencePipeline`: runs a callable through the built strategies, sync or asyncio.

The first strategy added is the outermost. The strategies' hooks are chained once, when the
pipeline is built (`_Plan`). Per execution the pipeline derives a context from the ambient one,
puts the call on it, and makes it the ambient context while the strategies run; the chain's
last step calls the callable under the context the strategies handed it, made ambient too
(`get_context()`).
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import sys
import threading
from dataclasses import dataclass
from types import CoroutineType, FunctionType
from typing import TYPE_CHECKING, Any, ParamSpec, Protocol, TypeVar, overload

from resilience._context import (
    ResilienceContext,
    current_context,
    execution_context,
    new_context,
    reset_context,
    set_context,
    use_context,
)
from resilience._outcome import Err, Ok, Outcome
from resilience._runtime._closing import Closing
from resilience.exceptions import ValidationError
from resilience.strategies._base import traits_of
from resilience.telemetry._event import Severity
from resilience.telemetry._source import CAPTURES, LOGGER, TelemetrySource, otel_active

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Coroutine, Sequence

    from resilience._time import TimeProvider
    from resilience.strategies._base import Strategy

__all__ = ["Decorator", "KeyedDecorator", "PipelineExecutedArguments", "ResiliencePipeline", "require_pipeline"]

P = ParamSpec("P")
T = TypeVar("T")

# Information is the higher of the two pipeline events' levels: if the logger would drop it
# and nobody else listens, neither event is produced.
_INFO = Severity.INFORMATION.log_level
# Until some code imports OpenTelemetry no SDK can be installed: one dictionary lookup tells.
_MODULES = sys.modules
_CLOSED = "pipeline closed: build a new one (close() stopped this one for good)"
_SWAPS = threading.Lock()
"""Orders the plan swaps of `close` and a reload (rare); executions read the plan without it."""
_OTEL = "opentelemetry"


@dataclass(frozen=True, slots=True)
class PipelineExecutedArguments:
    """Arguments of the `PipelineExecuted` event: how long the execution took, in seconds."""

    duration: float


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


# A plain `def` is told apart by its code flags (a tenth of `inspect.iscoroutinefunction`).
_ASYNC_FLAGS = inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR


def _refuse_before_running(fn: object) -> None:
    """Refuse a callable a sync execution cannot run, before any strategy sees the call.

    Checked before the strategies so that an open circuit or a held lock cannot hide the
    mistake behind a rejection, and a retry never retries it.
    """
    if type(fn) is FunctionType:
        if not fn.__code__.co_flags & _ASYNC_FLAGS:
            return
    elif not callable(fn):
        raise _not_callable(fn, "execute")
    elif not is_async_callable(fn):
        return
    msg = f"{_name_of(fn)} is an async function: run it with execute_async/settle_async (or decorate it)"
    raise ValidationError(msg)


def _not_callable(fn: object, method: str) -> ValidationError:
    return ValidationError(f"{method}: the first argument must be a callable, got {type(fn).__name__}")


def is_async_callable(fn: object) -> bool:
    """True for coroutine functions, partials of them, and objects with an `async __call__`."""
    while isinstance(fn, functools.partial):
        fn = fn.func
    if inspect.iscoroutinefunction(fn):
        return True
    call = getattr(fn, "__call__", None)  # noqa: B004 - the method itself is what we inspect
    return call is not None and inspect.iscoroutinefunction(call)


class Decorator(Protocol):
    """What `@pipeline(operation_key="param")` returns: a decorator that keeps the signature."""

    @overload
    def __call__(self, fn: Callable[P, Coroutine[Any, Any, T]], /) -> Callable[P, Coroutine[Any, Any, T]]: ...
    @overload
    def __call__(self, fn: Callable[P, T], /) -> Callable[P, T]: ...


class KeyedDecorator(Protocol[P]):
    """What `@pipeline(operation_key=fn)` returns: a decorator for functions taking `fn`'s parameters."""

    @overload
    def __call__(self, fn: Callable[P, Coroutine[Any, Any, T]], /) -> Callable[P, Coroutine[Any, Any, T]]: ...
    @overload
    def __call__(self, fn: Callable[P, T], /) -> Callable[P, T]: ...


def _operation_key_of(key: Callable[..., object], args: Any, kwargs: Any) -> str:
    resolved = key(*args, **kwargs)
    if not isinstance(resolved, str) or not resolved:
        msg = f"operation_key: {_name_of(key)} returned {resolved!r:.60}; it must return a non-empty str"
        raise ValidationError(msg)
    return resolved


def _argument_picker(fn: Callable[..., Any], name: str) -> Callable[..., str]:
    """A key function that returns the call's argument `name` as a string (`@pipeline(operation_key="order_id")`)."""
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):
        signature = None
    parameter = None if signature is None else signature.parameters.get(name)
    if signature is None or parameter is None or parameter.kind in {parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD}:
        msg = f"operation_key: {_name_of(fn)} has no parameter named {name!r} to take the operation key from"
        raise ValidationError(msg)
    # Its position, unless it is keyword-only (a variadic one was refused above).
    index = -1 if parameter.kind is parameter.KEYWORD_ONLY else list(signature.parameters).index(name)
    by_keyword = parameter.kind is not parameter.POSITIONAL_ONLY

    def pick(*args: Any, **kwargs: Any) -> str:
        if by_keyword and name in kwargs:
            value = kwargs[name]
        elif 0 <= index < len(args):
            value = args[index]
        else:  # a default, or a missing argument: the call's own binding says which
            value = signature.bind(*args, **kwargs).arguments.get(name, parameter.default)
        if value is None or value is parameter.empty:
            msg = f"operation_key: the argument {name!r} of {_name_of(fn)} is None; it cannot identify the call"
            raise ValidationError(msg)
        return str(value)

    pick.__qualname__ = f"<argument {name!r}>"
    return pick


def _unwrapped(fn: object, result: Outcome[T]) -> T:
    """The value of the `Outcome` `fn` returned (an `Err`'s error raised); a `ValidationError` for anything else."""
    checked: object = result  # the types say Outcome; a callable without them may return anything
    if isinstance(checked, Outcome):
        return result.unwrap()
    if _is_awaitable(result):
        raise _refuse_awaitable(fn, result)
    msg = f"{_name_of(fn)} returned {type(result).__name__}, not an Outcome: return Ok(value) or Err(error)"
    raise ValidationError(msg)


class _Plan:
    """What a pipeline runs: its strategies composed once, and the misuse they refuse, swapped as one reference.

    An execution reads `pipeline._plan` once, without a lock, so a registry's `reload` (one
    attribute write) never shows it half of one configuration and half of another. A plan with
    background work counts its executions in flight, so that retiring it (a reload, `close`)
    stops that work only once the last of them ended.
    """

    __slots__ = (
        "_closers",
        "_in_flight",
        "_lock",
        "_retired",
        "ambient",
        "async_problem",
        "chain",
        "chain_async",
        "strategies",
        "sync_problem",
    )

    def __init__(self, strategies: tuple[Strategy, ...], closers: Sequence[Callable[[], object]] = ()) -> None:
        self.strategies = strategies
        chain: Callable[[ResilienceContext], Any] = self._last_step
        chain_async: Callable[[ResilienceContext], Awaitable[Any]] = self._last_step_async
        for strategy in reversed(strategies):  # each strategy's hook over the next, the first added outermost
            chain = functools.partial(strategy.execute, chain)
            chain_async = functools.partial(strategy.execute_async, chain_async)
        traits = [traits_of(strategy) for strategy in strategies]
        self.sync_problem = next((t.sync_problem for t in traits if t.sync_problem), None)
        self.async_problem = next((t.async_problem for t in traits if t.async_problem), None)
        # A strategy that may hand on a context of its own: the execution's context is then
        # the ambient one while the strategies run, where `_target` finds the call.
        self.ambient = not all(t.hands_on_context for t in traits)
        self._closers = list(closers)
        self._retired = False
        self._in_flight = 0
        self._lock = threading.Lock()
        if self._closers:  # only a plan with background work to stop counts its executions
            chain = functools.partial(self._counted, chain)
            chain_async = functools.partial(self._counted_async, chain_async)
        self.chain = chain
        self.chain_async = chain_async

    def _counted(self, chain: Callable[[ResilienceContext], Any], context: ResilienceContext) -> Any:
        with self._lock:
            self._in_flight += 1
        try:
            return chain(context)
        finally:
            self._left()

    async def _counted_async(
        self, chain: Callable[[ResilienceContext], Awaitable[Any]], context: ResilienceContext
    ) -> Any:
        with self._lock:
            self._in_flight += 1
        try:
            return await chain(context)
        finally:
            self._left()

    def _left(self) -> None:
        with self._lock:
            self._in_flight -= 1
            last = self._retired and not self._in_flight
        if last:
            self._close_now()

    def retire(self) -> None:
        """No execution starts on this plan any more: stop its background work once none runs.

        Idempotent: the closers are taken once (`_close_now`).
        """
        with self._lock:
            self._retired = True
            idle = not self._in_flight
        if idle:
            self._close_now()

    def _close_now(self) -> None:
        with self._lock:
            closers, self._closers = self._closers, []
        for closer in reversed(closers):
            try:
                closer()
            except Exception:  # noqa: BLE001 - one failing closer must not keep the others running
                LOGGER.exception("a close callback raised; the rest of the background work stops anyway")

    def _target(self, inner: ResilienceContext) -> tuple[Callable[..., Any], Any, Any]:
        """What the last step calls, with its arguments; never under an aborted signal (docs/concepts.md).

        The call (`[fn, args, kwargs, plan, enclosing ambient context]`) travels on the
        contexts the strategies hand on (`derive`, `derive_scope`). A context that does not
        carry one of this plan's (made by a strategy itself, or taken from another execution)
        is served the innermost running execution of this plan.
        """
        inner.raise_if_aborted()
        call = inner._call
        if call is None or (call and call[3] is not self):  # an emptied call: its execution ended
            # The innermost running execution of this plan: executions nest through the ambient
            # context, and each one's call names the ambient context it started under.
            context = current_context()
            while context is not None and (call := context._call) and call[3] is not self:
                context = call[4]
            call = None if context is None else context._call
        # A copy: a hedged attempt may get here while its execution ends (and empties the list).
        found = tuple(call) if call else ()
        if len(found) != 5:
            reason = inner.abort_reason
            if reason is not None:  # an abandoned attempt, aborted as its execution ended
                raise reason
            msg = (
                "a strategy called the rest of the pipeline after its execution ended, or on a thread "
                "that does not carry the execution's context (run it with contextvars.copy_context().run)"
            )
            raise ValidationError(msg)
        substitute = inner._substitute
        return (found[0] if substitute is None else substitute), found[1], found[2]

    def _last_step(self, inner: ResilienceContext) -> Any:
        """The end of the sync chain: the user's callable, under the context the strategies made."""
        if inner._signal is not None or inner._signal_source is not None or inner._deadline is not None:
            inner.raise_if_aborted()  # a root context with no signal yet cannot have aborted
        try:  # the common case: `inner` carries this plan's call (see `_target` for the others)
            target, args, kwargs, plan, _ = inner._call  # type: ignore[misc]
        except (TypeError, ValueError):  # one step under the GIL: an emptied call fails it whole
            plan = None
        if plan is not self or inner._substitute is not None:
            target, args, kwargs = self._target(inner)
        token = set_context(inner)
        try:
            result = target(*args, **kwargs)
        finally:
            reset_context(token)
        if type(result) not in _PLAIN_TYPES and _is_awaitable(result):
            raise _refuse_awaitable(target, result)
        return result

    async def _last_step_async(self, inner: ResilienceContext) -> Any:
        """The end of the async chain (see `_last_step`)."""
        if inner._signal is not None or inner._signal_source is not None or inner._deadline is not None:
            inner.raise_if_aborted()
        try:
            target, args, kwargs, plan, _ = inner._call  # type: ignore[misc]
        except (TypeError, ValueError):
            plan = None
        if plan is not self or inner._substitute is not None:
            target, args, kwargs = self._target(inner)
        token = set_context(inner)
        try:
            awaitable = target(*args, **kwargs)
            if type(awaitable) is not CoroutineType and not _is_awaitable(awaitable):
                raise _refuse_non_awaitable(target, awaitable)
            return await awaitable
        finally:
            reset_context(token)


_CLOSED_PLAN = _Plan(())
"""The plan of every closed pipeline: every execution is refused before anything runs."""
_CLOSED_PLAN.sync_problem = _CLOSED_PLAN.async_problem = _CLOSED


def require_pipeline(value: object, owner: str) -> ResiliencePipeline:
    """`value` if it is a pipeline; else a `ValidationError` that asks for `.build()` where it fits."""
    if isinstance(value, ResiliencePipeline):
        return value
    if any(cls.__name__ == "PipelineBuilder" for cls in type(value).__mro__):
        msg = f"{owner}: pipeline: got a {type(value).__name__}, not a pipeline: did you forget .build()?"
    else:
        msg = f"{owner}: pipeline: must be a ResiliencePipeline (a builder's .build()), got {type(value).__name__}"
    raise ValidationError(msg)


class ResiliencePipeline(Closing):
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
        closers: Sequence[Callable[[], object]] = (),
    ) -> None:
        self._plan = _Plan(tuple(strategies), closers)
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
        parent = current_context()
        call = [fn, args, kwargs, plan, parent]
        # With no ambient context, a blank root context in one C call.
        context = new_context() if parent is None else execution_context(parent)
        context._call = call
        if (
            self._listened
            or LOGGER.isEnabledFor(_INFO)
            or CAPTURES.listeners
            or (_OTEL in _MODULES and otel_active(self._source.options))
        ):
            return self._observe(plan, context, fn)
        if plan.strategies:
            context._quiet = True
            if plan.ambient or type(fn) is not FunctionType or fn.__code__.co_flags & _ASYNC_FLAGS:
                return self._run(plan, context, fn)
            # A plain def through built-in strategies: `_run` inline, one frame less.
            try:
                return plan.chain(context)  # type: ignore[no-any-return]
            finally:
                call.clear()  # a kept context keeps no argument alive
        # No strategy and nobody listening: the whole execution inline (what "overhead" measures).
        if parent is not None:
            parent.raise_if_aborted()
        token = set_context(context)
        try:
            result = fn(*args, **kwargs)
        except TypeError:
            if not callable(fn):  # costs nothing unless the call failed
                raise _not_callable(fn, "execute") from None
            raise
        finally:
            reset_context(token)
        if type(result) not in _PLAIN_TYPES and _is_awaitable(result):
            raise _refuse_awaitable(fn, result)
        return result

    def _span(self, context: ResilienceContext) -> Any:
        """The execution span's context manager (`trace_executions`): a null one when no tracer records."""
        if not self._source.options.trace_executions:
            return contextlib.nullcontext()
        facts = {
            "pipeline.name": self.name,
            "pipeline.instance": self.instance_name,
            "operation.key": context.operation_key,
        }
        span = self._source.execution_span({name: value for name, value in facts.items() if value is not None})
        return contextlib.nullcontext() if span is None else span

    def _observe(self, plan: _Plan, context: ResilienceContext, fn: Callable[..., T]) -> T:
        with self._span(context):
            started = self._executing(context)
            try:
                result = self._run(plan, context, fn)
            except Exception as exc:
                self._executed(context, started, Err(exc))
                raise
            self._executed(context, started, Ok(result))
            return result

    def _run(self, plan: _Plan, context: ResilienceContext, fn: Callable[..., T]) -> T:
        """The strategies' chain over `context` (the ambient context while they run, if the plan says so)."""
        if type(fn) is not FunctionType or fn.__code__.co_flags & _ASYNC_FLAGS:  # a plain def passes here
            _refuse_before_running(fn)
        token = set_context(context) if plan.ambient else None
        try:
            return plan.chain(context)  # type: ignore[no-any-return]
        finally:
            if token is not None:
                reset_context(token)
            context._call.clear()  # type: ignore[union-attr]  # a kept context keeps no argument alive

    def settle(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> Ok[T] | Err:
        """Like `execute`, but return an `Outcome` (`Ok` or `Err`) instead of raising an `Exception`.

        `KeyboardInterrupt`, `SystemExit` and other `BaseException`s still propagate.
        """
        try:
            return Ok(self.execute(fn, *args, **kwargs))
        except Exception as exc:  # noqa: BLE001 - settling every Exception is the point
            return Err(exc)

    def execute_outcome(self, fn: Callable[P, Outcome[T]], /, *args: P.args, **kwargs: P.kwargs) -> Ok[T] | Err:
        """Run `fn`, which returns an `Outcome`, through the pipeline; return the final `Outcome`.

        An `Err(error)` that `fn` returns is handled by the strategies exactly like `error`
        raised (retried, counted by the circuit breaker), and so is an exception `fn` raises.
        Like `settle`, it never raises an `Exception`. Polly's `ExecuteOutcomeAsync`, for code
        that reports failures as values.
        """
        try:
            _refuse_before_running(fn)
        except ValidationError as exc:
            return Err(exc)

        def unwrap(*call_args: P.args, **call_kwargs: P.kwargs) -> T:  # an `Err` raised, for the strategies
            return _unwrapped(fn, fn(*call_args, **call_kwargs))

        return self.settle(functools.update_wrapper(unwrap, fn), *args, **kwargs)

    # -- async --------------------------------------------------------------------------------

    async def execute_async(self, fn: Callable[P, Awaitable[T]], /, *args: P.args, **kwargs: P.kwargs) -> T:
        """Await `fn(*args, **kwargs)` through the pipeline and return its result (or raise)."""
        plan = self._plan  # read once: a reload swaps it for the executions that start later
        if plan.async_problem is not None:
            raise ValidationError(plan.async_problem)
        parent = current_context()
        call = [fn, args, kwargs, plan, parent]
        context = new_context() if parent is None else execution_context(parent)  # see `execute`
        context._call = call
        if (
            self._listened
            or LOGGER.isEnabledFor(_INFO)
            or CAPTURES.listeners
            or (_OTEL in _MODULES and otel_active(self._source.options))
        ):
            return await self._observe_async(plan, context, fn)
        if plan.strategies:
            context._quiet = True
            token = set_context(context) if plan.ambient else None  # see `_run`
            try:
                if not callable(fn):
                    raise _not_callable(fn, "execute_async")
                return await plan.chain_async(context)  # type: ignore[no-any-return]
            finally:
                if token is not None:
                    reset_context(token)
                call.clear()  # a kept context keeps no argument alive
        if parent is not None:
            parent.raise_if_aborted()
        token = set_context(context)
        try:
            try:
                awaitable = fn(*args, **kwargs)
            except TypeError:
                if not callable(fn):  # costs nothing unless the call failed
                    raise _not_callable(fn, "execute_async") from None
                raise
            if type(awaitable) is not CoroutineType and not _is_awaitable(awaitable):
                raise _refuse_non_awaitable(fn, awaitable)
            return await awaitable
        finally:
            reset_context(token)

    async def _observe_async(self, plan: _Plan, context: ResilienceContext, fn: Callable[..., Awaitable[T]]) -> T:
        with self._span(context):
            started = self._executing(context)
            token = set_context(context) if plan.ambient else None  # see `_run`
            try:
                if not callable(fn):  # refused as an outcome of the execution (its event reports it)
                    raise _not_callable(fn, "execute_async")  # noqa: TRY301
                result: T = await plan.chain_async(context)
            except Exception as exc:
                self._executed(context, started, Err(exc))
                raise
            finally:
                if token is not None:
                    reset_context(token)
                context._call.clear()  # type: ignore[union-attr]  # a kept context keeps no argument alive
            self._executed(context, started, Ok(result))
            return result

    async def settle_async(self, fn: Callable[P, Awaitable[T]], /, *args: P.args, **kwargs: P.kwargs) -> Ok[T] | Err:
        """Like `execute_async`, but return an `Outcome` instead of raising an `Exception`."""
        try:
            return Ok(await self.execute_async(fn, *args, **kwargs))
        except Exception as exc:  # noqa: BLE001 - settling every Exception is the point
            return Err(exc)

    async def execute_outcome_async(
        self, fn: Callable[P, Awaitable[Outcome[T]]], /, *args: P.args, **kwargs: P.kwargs
    ) -> Ok[T] | Err:
        """The async twin of `execute_outcome`: `fn` returns an awaitable of an `Outcome`."""
        candidate: object = fn  # the types say callable; a caller without them may pass anything
        if not callable(candidate):
            return Err(_not_callable(fn, "execute_outcome_async"))

        async def unwrap(*call_args: P.args, **call_kwargs: P.kwargs) -> T:  # see `execute_outcome`
            awaitable = fn(*call_args, **call_kwargs)
            if not _is_awaitable(awaitable):
                raise _refuse_non_awaitable(fn, awaitable)
            return _unwrapped(fn, await awaitable)

        return await self.settle_async(functools.update_wrapper(unwrap, fn), *args, **kwargs)

    # -- decorator ----------------------------------------------------------------------------

    @overload
    def __call__(self, fn: Callable[P, Coroutine[Any, Any, T]], /) -> Callable[P, Coroutine[Any, Any, T]]: ...
    @overload
    def __call__(self, fn: Callable[P, T], /) -> Callable[P, T]: ...
    @overload
    def __call__(self, fn: None = None, /, *, operation_key: str) -> Decorator: ...
    @overload
    def __call__(self, fn: None = None, /, *, operation_key: Callable[P, str]) -> KeyedDecorator[P]: ...
    def __call__(self, fn: Callable[..., Any] | None = None, /, *, operation_key: object = None) -> Any:
        """Decorate a function (sync or async) so that every call runs through the pipeline.

        `@pipeline(operation_key="order_id")` also gives each call its operation key: the
        call's `order_id` argument, as a string. For a key made of several arguments pass a
        function taking the same parameters as the decorated one:
        `@pipeline(operation_key=lambda tenant, order_id: f"{tenant}/{order_id}")`. Either is
        the same as wrapping each call in `use_context(operation_key=...)`; a lock whose key
        function reads it (`add_lock(lambda ctx: f"order:{ctx.operation_key}")`) then takes one
        lease per order.
        """
        if fn is None:
            if not (isinstance(operation_key, str) and operation_key) and not callable(operation_key):
                msg = (
                    "operation_key: must be a parameter name or a function of the call's arguments, "
                    f"got {operation_key!r:.60}"
                )
                raise ValidationError(msg)
            return functools.partial(self._decorate, key=operation_key)
        if operation_key is not None:
            msg = "pass either a function or operation_key=, not both: @pipeline(operation_key=...)"
            raise ValidationError(msg)
        return self._decorate(fn, key=None)

    def _decorate(self, fn: Callable[P, Any], /, *, key: str | Callable[..., object] | None) -> Callable[P, Any]:
        """`fn` wrapped; `key` is the operation key's function, or the name of the argument it is."""
        if not callable(fn):
            raise _not_callable(fn, "the decorator")
        if isinstance(key, str):
            key = _argument_picker(fn, key)
        if inspect.isgeneratorfunction(fn) or inspect.isasyncgenfunction(fn):
            msg = (
                f"{_name_of(fn)} is a generator function: a pipeline runs a call to completion; "
                "decorate a function that returns (or awaits) a value instead"
            )
            raise ValidationError(msg)

        async def run_async(*args: P.args, **kwargs: P.kwargs) -> Any:
            if key is None:
                return await self.execute_async(fn, *args, **kwargs)
            with use_context(current_context(), operation_key=_operation_key_of(key, args, kwargs)):
                return await self.execute_async(fn, *args, **kwargs)

        def run(*args: P.args, **kwargs: P.kwargs) -> Any:
            if key is None:
                return self.execute(fn, *args, **kwargs)
            with use_context(current_context(), operation_key=_operation_key_of(key, args, kwargs)):
                return self.execute(fn, *args, **kwargs)

        return functools.update_wrapper(run_async if is_async_callable(fn) else run, fn)

    def _adopt(self, other: ResiliencePipeline) -> None:
        """Run `other`'s strategies from now on (the registry's reload; same name and telemetry).

        One reference write: executions already running keep the plan they read, and the old
        plan's background work stops when the last of them ends. A closed pipeline stays
        closed (`other` is closed instead).
        """
        with _SWAPS:
            old = self._plan
            if old is not _CLOSED_PLAN:
                self._plan = other._plan
        if old is _CLOSED_PLAN:
            other.close()
            raise ValidationError(_CLOSED)
        old.retire()
        other._source.emit("OnPipelineReloaded", Severity.INFORMATION)

    def _reload_failed(self, error: Exception) -> None:
        """Emit `OnPipelineReloadFailed`: the configuration in service stays."""
        self._source.emit("OnPipelineReloadFailed", Severity.ERROR, outcome=Err(error))

    # -- closing ------------------------------------------------------------------------------

    def close(self) -> None:
        """Stop the pipeline: later executions raise `ValidationError("pipeline closed ...")`.

        The background work its strategies started (a shared circuit's sync) stops once the
        executions in flight have ended; stores and clients passed in are left open.
        Idempotent.
        """
        with _SWAPS:
            plan = self._plan
            if plan is _CLOSED_PLAN:
                return
            self._plan = _CLOSED_PLAN
        plan.retire()

    def __repr__(self) -> str:
        names = ", ".join(type(s).__name__ for s in self._plan.strategies)
        return f"<ResiliencePipeline name={self.name!r} strategies=[{names}]>"
