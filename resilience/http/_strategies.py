"""HTTP flavours of retry, timeout and circuit breaker (.NET's `Http*StrategyOptions`).

Each is a `StrategyOptions` that, at `build()`, configures a built-in strategy for HTTP:

- `http_retry_strategy`: handles transient outcomes of idempotent requests only, waits what
  `Retry-After` says, closes the response it gives up on before waiting;
- `http_timeout_strategy`: a timeout that records its deadline, so the transport hands httpx
  the time left (a blocked sync read is then cut);
- `http_circuit_breaker_strategy`: one circuit per authority (scheme, host, port).
"""

from __future__ import annotations

import dataclasses
import inspect
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, TypeVar

import httpx

from resilience._validation import Duration, Problems
from resilience.http._classify import (
    REQUEST,
    current_request,
    is_response,
    is_transient,
    parse_retry_after,
    retry_allowed,
)
from resilience.http._transport import DEADLINE, discard, release_async
from resilience.strategies.circuit._core import CircuitState
from resilience.strategies.circuit._strategy import CircuitBreakerStrategy, CircuitBreakerStrategyOptions
from resilience.strategies.retry._strategy import RetryStrategyOptions
from resilience.strategies.timeout._strategy import TimeoutStrategy, TimeoutStrategyOptions

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Coroutine, Iterable

    from _typeshed import DataclassInstance

    from resilience._context import ResilienceContext
    from resilience._outcome import Outcome
    from resilience._time import TimeProvider
    from resilience.strategies._base import Strategy, StrategyBuildContext
    from resilience.strategies.circuit._controller import (
        CircuitBreakerManualControl,
        OnCircuitClosedArguments,
        OnCircuitHalfOpenedArguments,
        OnCircuitOpenedArguments,
    )
    from resilience.strategies.retry._core import Backoff
    from resilience.strategies.retry._strategy import OnRetryArguments, RetryDelayArguments
    from resilience.strategies.timeout._strategy import OnTimeoutArguments

__all__ = [
    "AuthorityCircuitBreaker",
    "DeadlineTimeout",
    "HttpCircuitBreakerStrategyOptions",
    "HttpRetryStrategyOptions",
    "HttpTimeoutStrategyOptions",
    "http_circuit_breaker_strategy",
    "http_retry_strategy",
    "http_timeout_strategy",
    "passed_on",
]

T = TypeVar("T")
Options = TypeVar("Options", bound="DataclassInstance")


def passed_on(options: DataclassInstance, kind: type[Options], **changed: Any) -> Options:
    """The built-in options `kind` given each field of `options` it has by name, `changed` replacing some.

    As .NET's `Http*StrategyOptions` derive from the built-in options, each HTTP options class
    declares the options it passes on under their own names; the others keep their defaults.
    """
    names = {field.name for field in dataclasses.fields(kind) if field.init}
    given = {field.name: getattr(options, field.name) for field in dataclasses.fields(options) if field.name in names}
    return kind(**{**given, **changed})


# -- retry ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class HttpRetryStrategyOptions:
    """Options of the HTTP retry (`http_retry_strategy(...)`); validated at `build()`."""

    max_retries: int = 3
    delay: Duration = 2.0
    backoff: Backoff = "exponential"
    jitter: bool = True
    max_delay: Duration | None = None
    handle: Callable[[Outcome[Any]], bool] | None = None
    use_retry_after: bool = True
    retry_unsafe_methods: bool = False
    on_retry: Callable[[OnRetryArguments], object] | None = None
    name: str = "Retry"

    def _retry(self, time_provider: TimeProvider) -> RetryStrategyOptions:
        handle = self.handle or is_transient
        unsafe = self.retry_unsafe_methods

        def retryable(outcome: Outcome[Any]) -> bool:
            return handle(outcome) and retry_allowed(current_request(outcome), unsafe_methods=unsafe)

        def delay_generator(args: RetryDelayArguments) -> float | None:
            value = args.outcome.value
            return parse_retry_after(value, time_provider.time()) if is_response(value) else None

        return passed_on(
            self,
            RetryStrategyOptions,
            handle=retryable,
            delay_generator=delay_generator if self.use_retry_after is True else None,
            on_retry=_closing(self.on_retry),
        )

    def validate(self, context: StrategyBuildContext, /) -> Iterable[str]:
        """Every problem with these options, as `"<option>: <what>"`."""
        problems = Problems()
        problems.callable("handle", self.handle)
        problems.boolean("use_retry_after", self.use_retry_after)
        problems.boolean("retry_unsafe_methods", self.retry_unsafe_methods)
        return [*self._retry(context.time_provider).validate(context), *problems.items]

    def create(self, context: StrategyBuildContext, /) -> Strategy:
        """A retry strategy configured for HTTP, that never waits past the nearest HTTP deadline."""
        clock = context.time_provider

        def time_left() -> float | None:
            deadline = DEADLINE.get()
            return None if deadline is None else deadline - clock.monotonic()

        return self._retry(clock).create(context, time_left=time_left)


def _closing(on_retry: Callable[[OnRetryArguments], object] | None) -> Callable[[OnRetryArguments], object]:
    """An `on_retry` that runs the user's, then releases the response given up on (before the delay).

    A small body is read into the response: if the wait is cut short (the caller's signal),
    the retry returns that response and it must still be readable.
    """

    def close(args: OnRetryArguments) -> object:
        result = None if on_retry is None else on_retry(args)
        response = args.outcome.value
        # Another client's response (the requests adapter: sync only), nothing to close, or a
        # sync stream (in-memory bodies are both kinds); an async execution awaits the others.
        if not isinstance(response, httpx.Response) or isinstance(response.stream, httpx.SyncByteStream):
            discard(response)
            return result
        return _close_after(result, response)

    return close


async def _close_after(result: object, response: httpx.Response) -> object:
    try:
        if inspect.isawaitable(result):
            result = await result
    finally:
        await release_async(response)
    return result


def http_retry_strategy(
    *,
    max_retries: int = 3,
    delay: Duration = 2.0,
    backoff: Backoff = "exponential",
    jitter: bool = True,
    max_delay: Duration | None = None,
    handle: Callable[[Outcome[Any]], bool] | None = None,
    use_retry_after: bool = True,
    retry_unsafe_methods: bool = False,
    on_retry: Callable[[OnRetryArguments], object] | None = None,
    name: str = "Retry",
) -> HttpRetryStrategyOptions:
    """Retry transient HTTP failures of requests that are safe to repeat (.NET's HTTP retry).

    `handle(outcome)` says what is transient (default `is_transient`: transport errors, attempt
    timeouts, 408, 429 and 5xx). Only idempotent methods are retried unless
    `retry_unsafe_methods`, an `Idempotency-Key` header or the request's `RETRY_EXTENSION` says
    otherwise. A `Retry-After` header (seconds or HTTP-date) replaces the backoff delay
    (`use_retry_after`), capped by `max_delay` (and by `MAX_DURATION`). A delay that reaches
    the nearest deadline of an enclosing HTTP timeout is not waited: the last outcome is the
    result at once, its response untouched. The response given up on is released before the
    delay, after `on_retry` ran (a small body read into it, so that it stays readable if the
    wait is cut short; a large one closed).
    """
    return HttpRetryStrategyOptions(**locals())


# -- timeout ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class HttpTimeoutStrategyOptions:
    """Options of the HTTP timeout (`http_timeout_strategy(...)`); validated at `build()`."""

    timeout: Duration = 30.0
    on_timeout: Callable[[OnTimeoutArguments], object] | None = None
    name: str = "Timeout"

    def validate(self, context: StrategyBuildContext, /) -> Iterable[str]:
        """Every problem with these options, as `"<option>: <what>"`."""
        return passed_on(self, TimeoutStrategyOptions).validate(context)

    def create(self, context: StrategyBuildContext, /) -> Strategy:
        """A timeout strategy that publishes its deadline to the transport."""
        return DeadlineTimeout(passed_on(self, TimeoutStrategyOptions).create(context), context.time_provider)


class DeadlineTimeout:
    """A timeout strategy that also publishes its deadline (`DEADLINE`) to the inner pipeline.

    What it publishes is the nearest deadline: its own, or an enclosing HTTP timeout's if that
    comes first. The transport hands the time left before it to httpx. A
    context variable, not a context property: one set and reset per execution, no allocation.
    """

    __slots__ = ("_clock", "_seconds", "_timeout")

    def __init__(self, timeout: TimeoutStrategy, clock: TimeProvider) -> None:
        self._timeout = timeout
        self._seconds = timeout.timeout
        self._clock = clock

    def _nearest(self) -> float:
        """This timeout's deadline, or the enclosing one if that comes first."""
        deadline = self._clock.monotonic() + self._seconds
        enclosing = DEADLINE.get()
        return deadline if enclosing is None else min(enclosing, deadline)

    def execute(self, callback: Callable[[ResilienceContext], T], context: ResilienceContext, /) -> T:
        """Run `callback` under the timeout, its deadline published (sync)."""
        token = DEADLINE.set(self._nearest())
        try:
            return self._timeout.execute(callback, context)
        finally:
            DEADLINE.reset(token)

    async def execute_async(
        self, callback: Callable[[ResilienceContext], Awaitable[T]], context: ResilienceContext, /
    ) -> T:
        """Await `callback` under the timeout, its deadline published (async)."""
        token = DEADLINE.set(self._nearest())
        try:
            return await self._timeout.execute_async(callback, context)
        finally:
            DEADLINE.reset(token)

    def __repr__(self) -> str:
        return f"<DeadlineTimeout timeout={self._seconds:g}>"


def http_timeout_strategy(
    timeout: Duration = 30.0,
    /,
    *,
    on_timeout: Callable[[OnTimeoutArguments], object] | None = None,
    name: str = "Timeout",
) -> HttpTimeoutStrategyOptions:
    """A timeout whose deadline the resilient transport hands to httpx as the request's timeout.

    Works as `timeout_strategy`; in addition, each attempt sent under it gets the time left
    (or less, if the client's own timeout is shorter) as httpx's connect, read, write and
    pool timeouts, so that a sync request blocked on the network is really cut.
    """
    return HttpTimeoutStrategyOptions(**locals())


# -- circuit breaker --------------------------------------------------------------------------

_MAX_CIRCUITS: Final = 1024


@dataclass(frozen=True, slots=True, kw_only=True)
class HttpCircuitBreakerStrategyOptions:
    """Options of the HTTP circuit breaker (`http_circuit_breaker_strategy(...)`)."""

    failure_ratio: float = 0.1
    minimum_throughput: int = 100
    sampling_duration: Duration = 30.0
    break_duration: Duration = 5.0
    handle: Callable[[Outcome[Any]], bool] | None = None
    per_authority: bool = True
    manual_control: CircuitBreakerManualControl | None = None
    on_opened: Callable[[OnCircuitOpenedArguments], object] | None = None
    on_closed: Callable[[OnCircuitClosedArguments], object] | None = None
    on_half_opened: Callable[[OnCircuitHalfOpenedArguments], object] | None = None
    name: str = "CircuitBreaker"

    def _circuit(self) -> CircuitBreakerStrategyOptions:
        return passed_on(self, CircuitBreakerStrategyOptions, handle=self.handle or is_transient)

    def validate(self, context: StrategyBuildContext, /) -> Iterable[str]:
        """Every problem with these options, as `"<option>: <what>"`."""
        problems = Problems()  # `handle` is checked by the circuit breaker's own options
        problems.boolean("per_authority", self.per_authority)
        return [*self._circuit().validate(context), *problems.items]

    def create(self, context: StrategyBuildContext, /) -> Strategy:
        """One circuit for every request, or a circuit per authority made on first use."""
        if not self.per_authority:
            return self._circuit().create(context)
        return AuthorityCircuitBreaker(self._circuit(), context)


class AuthorityCircuitBreaker:
    """A circuit per authority (scheme, host, port), each made on the first request to it.

    The authority is that of the request the transport is sending (`current_request()`); an
    execution without one uses a shared circuit under the key `""`. Beyond 1024 authorities
    the least recently used closed circuit is forgotten for each new one (an open circuit is
    never dropped): the busy hosts keep theirs.
    """

    __slots__ = ("_build", "_circuits", "_lock", "_options")

    def __init__(self, options: CircuitBreakerStrategyOptions, build: StrategyBuildContext) -> None:
        self._options = options
        self._build = build
        # Least recently used first: each execution moves its authority to the end.
        self._circuits: OrderedDict[str, CircuitBreakerStrategy] = OrderedDict()
        self._lock = threading.Lock()

    def circuit(self, key: str) -> CircuitBreakerStrategy:
        """The circuit of authority `key` (`"https://example.com:443"`), made if new."""
        with self._lock:  # two first requests to one authority must share its circuit
            circuit = self._circuits.get(key)
            if circuit is None:
                if len(self._circuits) >= _MAX_CIRCUITS:
                    # Forget one closed circuit. A snapshot: executions reorder the dict meanwhile (without the lock).
                    for old, known in list(self._circuits.items()):
                        if known.state is CircuitState.CLOSED:
                            self._circuits.pop(old, None)
                            break
                circuit = self._circuits[key] = self._options.create(self._build)
        return circuit

    @property
    def circuits(self) -> dict[str, CircuitState]:
        """A snapshot: each known authority and its circuit's state."""
        return {key: circuit.state for key, circuit in list(self._circuits.items())}

    def _current(self) -> CircuitBreakerStrategy:
        sending = REQUEST.get()
        key = "" if sending is None else sending[1]
        circuits = self._circuits
        circuit = circuits.get(key)
        if circuit is None:
            return self.circuit(key)
        try:  # noqa: SIM105 - the hot path: no context manager per request
            circuits.move_to_end(key)
        except KeyError:  # forgotten just now by another thread: this execution still uses it
            pass
        return circuit

    def execute(self, callback: Callable[[ResilienceContext], T], context: ResilienceContext, /) -> T:
        """Run `callback` through the circuit of the request's authority (sync)."""
        return self._current().execute(callback, context)

    def execute_async(
        self, callback: Callable[[ResilienceContext], Awaitable[T]], context: ResilienceContext, /
    ) -> Coroutine[Any, Any, T]:
        """The circuit of the request's authority, awaiting `callback` (async): its coroutine.

        A plain `def` that hands back the circuit's own coroutine: one level less in the chain
        that each suspension and resume of the request's task passes through. The circuit is
        chosen (and made, for a new authority) when this is called, not when it is awaited.
        """
        return self._current().execute_async(callback, context)

    def __repr__(self) -> str:
        return f"<AuthorityCircuitBreaker circuits={len(self._circuits)}>"


def http_circuit_breaker_strategy(
    *,
    failure_ratio: float = 0.1,
    minimum_throughput: int = 100,
    sampling_duration: Duration = 30.0,
    break_duration: Duration = 5.0,
    handle: Callable[[Outcome[Any]], bool] | None = None,
    per_authority: bool = True,
    manual_control: CircuitBreakerManualControl | None = None,
    on_opened: Callable[[OnCircuitOpenedArguments], object] | None = None,
    on_closed: Callable[[OnCircuitClosedArguments], object] | None = None,
    on_half_opened: Callable[[OnCircuitHalfOpenedArguments], object] | None = None,
    name: str = "CircuitBreaker",
) -> HttpCircuitBreakerStrategyOptions:
    """Polly's advanced circuit breaker over transient HTTP outcomes, one circuit per authority.

    `handle(outcome)` says what counts as a failure (default `is_transient`; a POST's 503 counts
    too: the method only matters for retrying). With `per_authority` (the default) each
    scheme-host-port gets its own circuit, so one failing host does not cut the others off;
    `manual_control` drives every one of them.
    """
    return HttpCircuitBreakerStrategyOptions(**locals())
