"""The concurrency limiter strategy: at most `limit` executions at once per partition key.

Without a store the permits are in-process (`_permits.LocalPermits`, Polly's
`ConcurrencyLimiter`): a caller that finds every permit taken joins the key's FIFO queue if it
has room (`queue`) and waits up to `wait`; a released permit goes to the first in line. Each
built strategy has its own permits. Rejection — queue full, or the wait ran out — raises
`RateLimiterRejectedError` (as in Polly, the rate limiter's error) with `retry_after=None`,
after the `OnRateLimiterRejected` event and `on_rejected`.

With a store each permit is a lease on it (`LeasedPermits`). The lock strategy already performs
the five steps of a lease — acquire (waiting fairly, woken by releases), run under the lease's
signal and fencing token, renew every ttl/3, lose, release exactly once — through the lease
engine. A store-backed concurrency limiter is that same strategy over a semaphore store: a
`LockStrategy` whose store adapter is `SemaphoreOps(store, limit)`, whose loss error is
`SemaphoreLeaseLostError`, and whose rejection is the limiter's (`RateLimiterRejectedError`,
`OnRateLimiterRejected`, `on_rejected`). No lease logic lives here.
"""

from __future__ import annotations

import contextvars
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from resilience._lease import SemaphoreOps
from resilience._validation import Duration, Problems, wrong_store
from resilience.exceptions import RateLimiterRejectedError, SemaphoreLeaseLostError
from resilience.stores._memory import MemoryLockStore, MemorySemaphoreStore
from resilience.stores._protocols import AsyncSemaphoreStore, SemaphoreStore
from resilience.stores._redis import RedisLockStore
from resilience.strategies._base import HANDS_ON
from resilience.strategies._common import off_clock, run_steps, run_steps_async
from resilience.strategies.limiting._permits import LocalPermits
from resilience.strategies.limiting._rate import (
    Limiter,
    OnRateLimiterRejectedArguments,
    carried,
    check_key,
    reject,
)
from resilience.strategies.lock._strategy import LockStrategy, LockStrategyOptions
from resilience.telemetry._source import Tally

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Iterable

    from resilience._context import ResilienceContext
    from resilience.strategies._base import StrategyBuildContext
    from resilience.strategies._common import Steps

__all__ = [
    "ConcurrencyLimiterStrategy",
    "ConcurrencyLimiterStrategyOptions",
    "LeasedPermits",
    "concurrency_limiter_strategy",
]

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class ConcurrencyLimiterStrategyOptions:
    """Options of the concurrency limiter (see `concurrency_limiter_strategy`); validated at `build()`."""

    limit: int
    key: str | Callable[[ResilienceContext], str] = ""
    store: SemaphoreStore | AsyncSemaphoreStore | None = None
    ttl: Duration = 30.0
    wait: Duration = 0.0
    queue: int = 0
    on_rejected: Callable[[OnRateLimiterRejectedArguments], object] | None = None
    name: str = "ConcurrencyLimiter"

    def validate(self, context: StrategyBuildContext, /) -> Iterable[str]:
        """Every problem with the options, as `"<option>: <what is wrong>"`."""
        problems = Problems()
        problems.integer("limit", self.limit, minimum=1)
        check_key(problems, self.key)
        store: object = self.store
        if store is not None:
            semaphore = isinstance(store, SemaphoreStore | AsyncSemaphoreStore)
            if isinstance(store, MemoryLockStore | RedisLockStore) or not semaphore:
                requirement = "must implement SemaphoreStore or AsyncSemaphoreStore"
                problems.add("store", wrong_store(store, "RedisSemaphoreStore", "resilience.stores", requirement))
            elif isinstance(store, MemorySemaphoreStore) and store.time_provider is not context.time_provider:
                problems.add("store", off_clock("MemorySemaphoreStore", "leases expire on its clock", ""))
        problems.duration("ttl", self.ttl, minimum=0.001)
        wait = problems.duration("wait", self.wait)
        queue = problems.integer("queue", self.queue, minimum=0)
        if store is not None and queue:
            problems.add("queue", "applies to the in-process limiter; with a store, waiters queue in the store, fairly")
        elif store is None and wait is not None and queue is not None:
            if queue > 0 and wait == 0:
                problems.add("queue", "queued callers wait up to `wait`: set wait > 0, or queue=0 to reject at once")
            if wait > 0 and queue == 0:
                problems.add("wait", "an in-process limiter's callers wait in its queue: set queue > 0")
        problems.callable("on_rejected", self.on_rejected)
        problems.name("name", self.name)
        return problems.items

    def create(self, context: StrategyBuildContext, /) -> ConcurrencyLimiterStrategy | LeasedPermits:
        """A concurrency limiter: its own in-process permits, or leases on the store's."""
        return ConcurrencyLimiterStrategy(self, context) if self.store is None else LeasedPermits(self, context)


def concurrency_limiter_strategy(
    limit: int,
    /,
    *,
    key: str | Callable[[ResilienceContext], str] = "",
    store: SemaphoreStore | AsyncSemaphoreStore | None = None,
    ttl: Duration = 30.0,
    wait: Duration = 0.0,
    queue: int = 0,
    on_rejected: Callable[[OnRateLimiterRejectedArguments], object] | None = None,
    name: str = "ConcurrencyLimiter",
) -> ConcurrencyLimiterStrategyOptions:
    """Options of a concurrency limiter: at most `limit` executions at once, per key.

    Args:
        limit: executions at once per key (int >= 1).
        key: the partition: a str, or a function of the execution's context returning one.
        store: None: the permits are in-process, one set per `build()`. A semaphore store
            (`RedisSemaphoreStore` for a fleet): each permit is a lease, renewed every ttl/3,
            fenced (`get_lock_token()`), lost like a lock's lease.
        ttl: the lease length of a store-backed permit (>= 1 ms; unused in process).
        wait: how long a caller waits for a permit: in the queue (in process, > 0 when
            `queue` > 0), or in the store's fair order, woken by releases (with a store).
        queue: in process, how many callers per key may wait, admitted first come, first served
            (Polly's `QueueLimit`); 0 rejects at once when every permit is taken. Not used with a
            store (its waiters queue in the store).
        on_rejected: called with `OnRateLimiterRejectedArguments` before the rejection is
            raised (`retry_after`: None in process; with a store, when the first permit's lease
            runs out, if the store says).
        name: the strategy's name (problems, telemetry).

    A rejected execution raises `RateLimiterRejectedError` with the key; the callable never ran.
    """
    return ConcurrencyLimiterStrategyOptions(**locals())


class ConcurrencyLimiterStrategy(Limiter):
    """The built concurrency limiter (see the module docstring)."""

    traits = HANDS_ON

    __slots__ = ("_limit", "_permits", "_pool", "carry_key")

    def __init__(self, options: ConcurrencyLimiterStrategyOptions, context: StrategyBuildContext) -> None:
        super().__init__(options, context)
        self._limit = options.limit
        self.carry_key, permits = carried(context, self.name, "concurrency", options.limit, options.queue)
        if permits is None:
            permits = LocalPermits(options.limit, options.queue, context.time_provider)
            context.telemetry.observe("resilience.limiter.in_use", permits, LocalPermits.in_use)
            context.telemetry.observe("resilience.limiter.queued", permits, LocalPermits.queued)
        # Carried permits are observed already, for as long as they live.
        self._permits: LocalPermits = permits
        # A constant key and no queue: a permit is a token popped from the key's pool and
        # appended back, no lock (`LocalPermits.pool`).
        self._pool = permits.pool(self._key) if type(self._key) is str else None

    def carry(self) -> tuple[tuple[Any, ...], Any]:
        """`(carry_key, permits)` for the pipeline that replaces this one (a registry's reload)."""
        return self.carry_key, self._permits

    def execute(self, callback: Callable[[ResilienceContext], T], context: ResilienceContext, /) -> T:
        """Run `callback` holding a permit of its key (waiting in the queue if allowed), else reject."""
        pool = self._pool
        if pool is not None:
            try:
                pool.pop()
            except IndexError:
                run_steps(self._rejected(context, self._key))  # type: ignore[arg-type]  # a str: it has a pool
            try:
                return callback(context)
            finally:
                pool.append(None)
        key = self._resolve_key(context)
        permits = self._permits
        if not permits.try_acquire(key) and (self._wait <= 0 or not permits.acquire(key, self._wait, context.signal)):
            run_steps(self._rejected(context, key))
        try:
            return callback(context)
        finally:
            permits.release(key)

    async def execute_async(
        self, callback: Callable[[ResilienceContext], Awaitable[T]], context: ResilienceContext, /
    ) -> T:
        """The asyncio twin of `execute`."""
        pool = self._pool
        if pool is not None:
            try:
                pool.pop()
            except IndexError:
                await run_steps_async(self._rejected(context, self._key))  # type: ignore[arg-type]  # a str: it has a pool
            try:
                return await callback(context)
            finally:
                pool.append(None)
        key = self._resolve_key(context)
        permits = self._permits
        if not permits.try_acquire(key) and (
            self._wait <= 0 or not await permits.acquire_async(key, self._wait, context.signal)
        ):
            await run_steps_async(self._rejected(context, key))
        try:
            return await callback(context)
        finally:
            permits.release(key)

    def __repr__(self) -> str:
        return f"<ConcurrencyLimiterStrategy name={self.name!r} limit={self._limit} key={self._key!r}>"


# The rejection this execution's limiter just raised, with its arguments: the lock strategy
# raises it from deep inside, where `on_rejected` (sync or awaited) cannot run.
_REJECTED: contextvars.ContextVar[tuple[object, RateLimiterRejectedError, OnRateLimiterRejectedArguments] | None] = (
    contextvars.ContextVar("resilience._permit_rejected", default=None)
)


class LeasedPermits(LockStrategy):
    """The concurrency limiter over a `SemaphoreStore`/`AsyncSemaphoreStore` (see the module docstring)."""

    def __init__(self, options: ConcurrencyLimiterStrategyOptions, context: StrategyBuildContext) -> None:
        lock_options = LockStrategyOptions(options.key, ttl=options.ttl, wait=options.wait, name=options.name)
        self._setup(lock_options, context, "semaphore", SemaphoreLeaseLostError)
        self._callers = Tally()  # executions inside: waiting for a permit, or holding one
        context.telemetry.observe("resilience.limiter.in_use", self, _in_use)
        context.telemetry.observe("resilience.limiter.queued", self, _queued)
        store = options.store
        self._bind(SemaphoreOps(store, options.limit), f"the semaphore store {store!r}", "RedisSemaphoreStore")
        self.limit = options.limit
        self.on_rejected = options.on_rejected
        self.limiter_telemetry = context.telemetry

    def _reject(  # type: ignore[override]
        self, context: ResilienceContext, key: str, started: float, retry_after: float | None, *, reentrant: bool
    ) -> RateLimiterRejectedError:
        del started
        error, arguments = reject(self.limiter_telemetry, context, key, retry_after)
        if reentrant:
            error = RateLimiterRejectedError(
                key, None, message=f"this execution already holds a permit of {key!r} (permits are not reentrant)"
            )
        _REJECTED.set((self, error, arguments))
        return error

    def _told(self, error: RateLimiterRejectedError) -> Steps:
        """`on_rejected`, for both shells, when `error` is this limiter's own rejection (see `_REJECTED`)."""
        rejected = _REJECTED.get()
        if rejected is not None and rejected[0] is self and rejected[1] is error:
            _REJECTED.set(None)
            if self.on_rejected is not None:
                yield self.on_rejected, rejected[2]
        yield None, None

    def execute(self, callback: Callable[[ResilienceContext], T], context: ResilienceContext, /) -> T:
        """Run `callback` holding a leased permit (the lock strategy's five steps), else reject."""
        try:
            with self._callers:
                return LockStrategy.execute(self, callback, context)
        except RateLimiterRejectedError as error:
            run_steps(self._told(error))
            raise

    async def execute_async(
        self, callback: Callable[[ResilienceContext], Awaitable[T]], context: ResilienceContext, /
    ) -> T:
        """The asyncio twin of `execute`."""
        try:
            with self._callers:
                return await LockStrategy.execute_async(self, callback, context)
        except RateLimiterRejectedError as error:
            await run_steps_async(self._told(error))
            raise

    def __repr__(self) -> str:
        return f"<ConcurrencyLimiterStrategy name={self.name!r} limit={self.limit} key={self._key!r} ttl={self._ttl!r}>"


def _in_use(permits: LeasedPermits) -> int:
    return len(permits._events.held)


def _queued(permits: LeasedPermits) -> int:
    return max(permits._callers.value - len(permits._events.held), 0)
