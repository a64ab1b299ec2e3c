"""Store-backed permits of the concurrency limiter: each permit is a lease on a semaphore store.

The lock strategy already performs the five steps of a lease — acquire (waiting fairly, woken
by releases), run under the lease's signal and fencing token, renew every ttl/3, lose, release
exactly once — through the lease engine. A store-backed concurrency limiter is that same
strategy over a semaphore store: `LeasedPermits` is a `LockStrategy` whose store adapter is
`SemaphoreOps(store, limit)`, whose loss error is `SemaphoreLeaseLostError`, and whose
rejection is the limiter's (`RateLimiterRejectedError`, `OnRateLimiterRejected`,
`on_rejected`). No lease logic lives here.
"""

from __future__ import annotations

import contextvars
from dataclasses import replace
from typing import TYPE_CHECKING, TypeVar

from resilience._lease import LockEvents, SemaphoreOps
from resilience.exceptions import RateLimiterRejectedError, SemaphoreLeaseLostError
from resilience.strategies._common import call_back, call_back_async
from resilience.strategies.limiting._rate import reject
from resilience.strategies.lock._strategy import LockStrategy, LockStrategyOptions
from resilience.telemetry._source import Tally

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from resilience._context import ResilienceContext
    from resilience.strategies._base import StrategyBuildContext
    from resilience.strategies.limiting._concurrency import ConcurrencyLimiterStrategyOptions
    from resilience.strategies.limiting._rate import OnRateLimiterRejectedArguments

__all__ = ["LeasedPermits"]

T = TypeVar("T")

# The rejection this execution's limiter just raised, with its arguments: the lock strategy
# raises it from deep inside, where `on_rejected` (sync or awaited) cannot run.
_REJECTED: contextvars.ContextVar[tuple[object, RateLimiterRejectedError, OnRateLimiterRejectedArguments] | None] = (
    contextvars.ContextVar("resilience._permit_rejected", default=None)
)


class LeasedPermits(LockStrategy):
    """The concurrency limiter over a `SemaphoreStore`/`AsyncSemaphoreStore` (see the module docstring)."""

    def __init__(self, options: ConcurrencyLimiterStrategyOptions, context: StrategyBuildContext) -> None:
        lock_options = LockStrategyOptions(options.key, ttl=options.ttl, wait=options.wait, name=options.name)
        self._setup(lock_options, context)
        self._events = LockEvents(context.telemetry, self._time_provider, "semaphore")
        self._callers = Tally()  # executions inside: waiting for a permit, or holding one
        context.telemetry.observe("resilience.limiter.in_use", self, _in_use)
        context.telemetry.observe("resilience.limiter.queued", self, _queued)
        store = options.store
        self._bind(SemaphoreOps(store, options.limit), f"the semaphore store {store!r}", "RedisSemaphoreStore")
        # The lock's lease parameters, losing with the semaphore's error.
        self._params = replace(self._params, error_type=SemaphoreLeaseLostError)
        self._async_params = replace(self._async_params, error_type=SemaphoreLeaseLostError)
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

    def _ours(self, error: RateLimiterRejectedError) -> OnRateLimiterRejectedArguments | None:
        rejected = _REJECTED.get()
        if rejected is None or rejected[0] is not self or rejected[1] is not error:
            return None
        _REJECTED.set(None)
        return rejected[2]

    def execute(self, callback: Callable[[ResilienceContext], T], context: ResilienceContext, /) -> T:
        """Run `callback` holding a leased permit (the lock strategy's five steps), else reject."""
        try:
            with self._callers:
                return LockStrategy.execute(self, callback, context)
        except RateLimiterRejectedError as error:
            arguments = self._ours(error)
            if arguments is not None and self.on_rejected is not None:
                call_back(self.on_rejected, arguments)
            raise

    async def execute_async(
        self, callback: Callable[[ResilienceContext], Awaitable[T]], context: ResilienceContext, /
    ) -> T:
        """The asyncio twin of `execute`."""
        try:
            with self._callers:
                return await LockStrategy.execute_async(self, callback, context)
        except RateLimiterRejectedError as error:
            arguments = self._ours(error)
            if arguments is not None and self.on_rejected is not None:
                await call_back_async(self.on_rejected, arguments)
            raise

    def __repr__(self) -> str:
        return f"<ConcurrencyLimiterStrategy name={self.name!r} limit={self.limit} key={self._key!r} ttl={self._ttl!r}>"


def _in_use(permits: LeasedPermits) -> int:
    return len(permits._events.held)


def _queued(permits: LeasedPermits) -> int:
    return max(permits._callers.value - len(permits._events.held), 0)
