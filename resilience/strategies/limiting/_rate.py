"""The rate limiter strategy: at most `limit` executions per `per` seconds, per partition key.

Each execution asks the store for one permit of its key (`take`): granted, the callable runs
under the caller's context unchanged; refused, the strategy waits the exact retry-after the
store answered (while `wait` allows, ending at once if the signal aborts) and asks again, or
rejects with `RateLimiterRejectedError` and the `OnRateLimiterRejected` event. The decisions
are pure code (`resilience/limiters/_algorithms.py`) or one Lua script per decision (Redis).

Without a store each built strategy has its own in-process limits: a `MemoryRateLimitStore`
on the pipeline's clock, whose decision the strategy calls directly (arguments checked once).
"""

from __future__ import annotations

from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, TypeAlias, TypeVar, cast

from resilience._validation import Duration, Problems, to_seconds, wrong_store
from resilience.exceptions import RateLimiterRejectedError, ValidationError
from resilience.limiters._algorithms import ALGORITHMS, RateLimitAlgorithm, check_rate
from resilience.limiters._memory import MemoryRateLimitStore
from resilience.limiters._protocols import AsyncRateLimitStore, RateLimitStore
from resilience.stores._protocols import serves
from resilience.strategies._common import Steps, off_clock, run_steps, run_steps_async, store_traits, wait, wait_async
from resilience.telemetry._event import Severity

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Iterable

    from resilience._context import ResilienceContext
    from resilience._time import TimeProvider
    from resilience.strategies._base import StrategyBuildContext
    from resilience.strategies.limiting._concurrency import ConcurrencyLimiterStrategyOptions
    from resilience.telemetry._source import TelemetrySource

__all__ = [
    "CARRIED",
    "Limiter",
    "OnRateLimiterRejectedArguments",
    "RateLimiterStrategy",
    "RateLimiterStrategyOptions",
    "carried",
    "rate_limiter_strategy",
    "reject",
]

T = TypeVar("T")

CARRIED: Final[ContextVar[dict[tuple[Any, ...], Any] | None]] = ContextVar("resilience_carried", default=None)
"""While a registry reloads a pipeline: the in-process limiter states of the one it replaces.

Keyed by `(pipeline name, instance, strategy name, options that shape the state)`; a limiter
built then with the same key takes that state (once) instead of fresh state.
"""


def carried(context: StrategyBuildContext, *shape: Any) -> tuple[tuple[Any, ...], Any]:
    """An in-process limiter's carry key, and the state carried over for it from the pipeline being reloaded.

    `shape`: the strategy's name, its kind and the options that shape its state. The state is
    None when there is none to carry (build fresh).
    """
    key = (context.pipeline_name, context.pipeline_instance, *shape)
    states = CARRIED.get()
    return key, None if states is None else states.pop(key, None)


@dataclass(frozen=True, slots=True)
class OnRateLimiterRejectedArguments:
    """What `on_rejected` receives when a rate or concurrency limiter rejects an execution."""

    context: ResilienceContext
    key: str
    """The limiter's partition key."""
    retry_after: float | None
    """Seconds until a permit is free, when the limiter knows it (None for concurrency limits)."""


def check_key(problems: Problems, key: object) -> None:
    """Record what is wrong with a limiter's `key` option (a str, possibly empty, or a callable)."""
    if not isinstance(key, str) and not callable(key):
        problems.add("key", f"must be a str or a callable taking the context, got {key!r}")


def reject(
    telemetry: TelemetrySource, context: ResilienceContext, key: str, retry_after: float | None
) -> tuple[RateLimiterRejectedError, OnRateLimiterRejectedArguments]:
    """Emit `OnRateLimiterRejected`; the error to raise and the arguments for `on_rejected`."""
    arguments = OnRateLimiterRejectedArguments(context, key, retry_after)
    telemetry.emit("OnRateLimiterRejected", Severity.ERROR, operation_key=context.operation_key, arguments=arguments)
    return RateLimiterRejectedError(key, retry_after), arguments


@dataclass(frozen=True, slots=True)
class RateLimiterStrategyOptions:
    """Options of the rate limiter (see `rate_limiter_strategy`); validated at `build()`."""

    limit: int
    per: Duration = 1.0
    burst: int | None = None
    algorithm: RateLimitAlgorithm = "token_bucket"
    key: str | Callable[[ResilienceContext], str] = ""
    store: RateLimitStore | AsyncRateLimitStore | None = None
    wait: Duration = 0.0
    on_rejected: Callable[[OnRateLimiterRejectedArguments], object] | None = None
    name: str = "RateLimiter"

    def validate(self, context: StrategyBuildContext, /) -> Iterable[str]:
        """Every problem with the options, as `"<option>: <what is wrong>"`."""
        problems = Problems()
        problems.integer("limit", self.limit, minimum=1)
        problems.duration("per", self.per, positive=True)
        algorithm: object = self.algorithm
        if algorithm not in ALGORITHMS:
            problems.add("algorithm", f"must be one of {', '.join(map(repr, ALGORITHMS))}, got {algorithm!r}")
        if self.burst is not None:
            problems.integer("burst", self.burst, minimum=1)
            if algorithm in ALGORITHMS and algorithm != "token_bucket":
                problems.add("burst", f"applies to the token bucket only; the {algorithm} grants `limit` per window")
        # Options valid one by one are then checked together (an unknown algorithm is a problem already).
        if not problems.items and (rate := check_rate(self.limit, to_seconds(self.per), self.burst, self.algorithm)):
            problems.add(*rate)
        check_key(problems, self.key)
        store: object = self.store
        if store is not None:
            if not serves(store, RateLimitStore, AsyncRateLimitStore):
                requirement = "must implement RateLimitStore or AsyncRateLimitStore"
                problems.add("store", wrong_store(store, "RedisRateLimitStore", "resilience.limiters", requirement))
            elif isinstance(store, MemoryRateLimitStore) and store.time_provider is not context.time_provider:
                problems.add("store", off_clock("MemoryRateLimitStore", "limits run on its clock"))
        problems.duration("wait", self.wait)
        problems.callable("on_rejected", self.on_rejected)
        problems.name("name", self.name)
        return problems.items

    def create(self, context: StrategyBuildContext, /) -> RateLimiterStrategy:
        """A rate limiter for one pipeline (with its own in-process limits when no store is given)."""
        return RateLimiterStrategy(self, context)


def rate_limiter_strategy(
    limit: int,
    /,
    *,
    per: Duration = 1.0,
    burst: int | None = None,
    algorithm: RateLimitAlgorithm = "token_bucket",
    key: str | Callable[[ResilienceContext], str] = "",
    store: RateLimitStore | AsyncRateLimitStore | None = None,
    wait: Duration = 0.0,
    on_rejected: Callable[[OnRateLimiterRejectedArguments], object] | None = None,
    name: str = "RateLimiter",
) -> RateLimiterStrategyOptions:
    """Options of a rate limiter: at most `limit` executions per `per` seconds, per key.

    Args:
        limit: permits per `per` seconds (int >= 1).
        per: the period, in seconds (> 0).
        burst: the token bucket's capacity: how many executions may run back to back after a
            quiet spell (default `limit`). Only for `algorithm="token_bucket"`.
        algorithm: `"token_bucket"` (GCRA: smooth, exact retry-after), `"sliding_window"`
            (at most `limit` in any `per` seconds) or `"fixed_window"` (`limit` per window
            opened by the first request).
        key: the partition: a str, or a function of the execution's context returning one
            (e.g. `lambda ctx: f"tenant:{ctx.operation_key}"`); each key has its own limit.
        store: where the limits live. Default: in-process, one set of limits per `build()`.
            Pass `RedisRateLimitStore` to share them across processes.
        wait: how long an execution may wait for a permit before it is rejected (0: reject at
            once). A wait ends at once when the context's signal aborts.
        on_rejected: called with `OnRateLimiterRejectedArguments` before the rejection is raised.
        name: the strategy's name (problems, telemetry).

    A rejected execution raises `RateLimiterRejectedError` with the partition `key` and the
    exact `retry_after`; the callable never ran.
    """
    return RateLimiterStrategyOptions(**locals())


class Limiter:
    """What the rate and concurrency limiters share: the name, the key, the wait, and the rejection."""

    __slots__ = ("_key", "_on_rejected", "_telemetry", "_wait", "name")

    def __init__(
        self, options: RateLimiterStrategyOptions | ConcurrencyLimiterStrategyOptions, context: StrategyBuildContext
    ) -> None:
        self.name = options.name
        self._key = options.key
        self._wait = to_seconds(options.wait)
        self._on_rejected = options.on_rejected
        self._telemetry: TelemetrySource = context.telemetry

    def _resolve_key(self, context: ResilienceContext) -> str:
        """The partition key of one execution."""
        key = self._key
        if isinstance(key, str):
            return key
        resolved: object = key(context)
        if not isinstance(resolved, str):
            msg = f"{self.name}.key: the key function returned {resolved!r}; it must return a str"
            raise ValidationError(msg)
        return resolved

    def _rejected(self, context: ResilienceContext, key: str, retry_after: float | None = None) -> Steps:
        """Reject an execution, for both shells: the event, `on_rejected`, then `RateLimiterRejectedError`.

        The steps raise the error themselves: driven by `run_steps`, they never answer.
        """
        error, arguments = reject(self._telemetry, context, key, retry_after)
        if self._on_rejected is not None:
            yield self._on_rejected, arguments
        raise error


_Rate: TypeAlias = tuple[int, float, int | None, RateLimitAlgorithm]


class RateLimiterStrategy(Limiter):
    """The built rate limiter (see the module docstring)."""

    __slots__ = ("_decide", "_rate", "_store", "_time", "carry_key", "traits")

    def __init__(self, options: RateLimiterStrategyOptions, context: StrategyBuildContext) -> None:
        super().__init__(options, context)
        # `take`'s (limit, per, burst, algorithm), in its order.
        self._rate: _Rate = (options.limit, to_seconds(options.per), options.burst, options.algorithm)
        self._time: TimeProvider = context.time_provider
        self.carry_key: tuple[Any, ...] | None = None  # set when the limits are in process
        store = options.store
        if store is None:
            self.carry_key, store = carried(context, self.name, "rate", *self._rate)
            if store is None:
                store = MemoryRateLimitStore(context.time_provider)
        self._store: RateLimitStore | AsyncRateLimitStore = store
        # An in-process store decides without a call through `take` (arguments checked here, once).
        self._decide: Callable[[str], float] | None = (
            store._decider(*self._rate) if isinstance(store, MemoryRateLimitStore) else None
        )
        self.traits = store_traits(
            f"{self.name}: the rate-limit store {store!r}",
            has_sync=serves(store, RateLimitStore),
            has_async=serves(store, AsyncRateLimitStore),
            example="RedisRateLimitStore",
        )

    def carry(self) -> tuple[tuple[Any, ...], Any] | None:
        """`(carry_key, state)` for the pipeline that replaces this one, if the limits are in process."""
        return None if self.carry_key is None else (self.carry_key, self._store)

    # Ask a store that is not in process (`_decide` is None). The flavour is not checked per
    # call: `traits` refuses a sync execution over an asyncio-only store, and the reverse.

    def _take(self, key: str) -> float:
        return cast("RateLimitStore", self._store).take(key, *self._rate)

    async def _take_async(self, key: str) -> float:
        return await cast("AsyncRateLimitStore", self._store).take_async(key, *self._rate)

    def execute(self, callback: Callable[[ResilienceContext], T], context: ResilienceContext, /) -> T:
        """Take a permit (waiting up to `wait`), then run `callback`; else reject (sync)."""
        key = self._key if type(self._key) is str else self._resolve_key(context)  # a constant: no call
        decide = self._decide
        deadline = None  # read from the clock at the first refusal only
        while retry_after := (decide(key) if decide is not None else self._take(key)):
            if deadline is None:
                deadline = self._time.monotonic() + self._wait
            if retry_after > deadline - self._time.monotonic():
                run_steps(self._rejected(context, key, retry_after))
            if wait(self._time, retry_after, context.signal):
                context.signal.raise_if_aborted()
        return callback(context)

    async def execute_async(
        self, callback: Callable[[ResilienceContext], Awaitable[T]], context: ResilienceContext, /
    ) -> T:
        """The asyncio twin of `execute`."""
        key = self._key if type(self._key) is str else self._resolve_key(context)  # a constant: no call
        decide = self._decide
        deadline = None
        while retry_after := (decide(key) if decide is not None else await self._take_async(key)):
            if deadline is None:
                deadline = self._time.monotonic() + self._wait
            if retry_after > deadline - self._time.monotonic():
                await run_steps_async(self._rejected(context, key, retry_after))
            if await wait_async(self._time, retry_after, context.signal):
                context.signal.raise_if_aborted()
        return await callback(context)

    def __repr__(self) -> str:
        limit, per, _, algorithm = self._rate
        rate = f"limit={limit} per={per:g} algorithm={algorithm!r}"
        return f"<RateLimiterStrategy name={self.name!r} {rate} key={self._key!r}>"
