"""HTTP hedging (.NET's `HttpHedgingStrategyOptions`): hedge slow or failed requests that are safe to repeat.

`http_hedging_strategy` configures the built-in hedging strategy for HTTP: transient outcomes
(and an open circuit) are handled, so another attempt is sent; a request that is not safe to
send twice (a POST, unless it opts in as for retry) is not hedged at all; and sync attempts are
made abortable (`ABORTABLE`, see `_transport.py`), so a loser's blocked read never holds the
winner's response back.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, TypeVar

from resilience._validation import Problems
from resilience.exceptions import BrokenCircuitError, RateLimiterRejectedError
from resilience.http._classify import current_request, is_transient, retry_allowed
from resilience.http._strategies import passed_on
from resilience.http._transport import ABORTABLE
from resilience.strategies.hedging._strategy import HedgingStrategyOptions

if TYPE_CHECKING:
    import datetime as dt
    from collections.abc import Awaitable, Callable, Iterable

    from resilience._context import ResilienceContext
    from resilience._outcome import Outcome
    from resilience._validation import Duration
    from resilience.strategies._base import StrategyBuildContext
    from resilience.strategies.hedging._strategy import HedgingDelayArguments, HedgingStrategy, OnHedgingArguments

__all__ = ["HttpHedging", "HttpHedgingStrategyOptions", "http_hedging_strategy", "is_hedgeable"]

T = TypeVar("T")


# An attempt refused before it was sent: it must not win the race against one still in flight.
_REFUSED: Final = (BrokenCircuitError, RateLimiterRejectedError)


def is_hedgeable(outcome: Outcome[Any]) -> bool:
    """True when an attempt's outcome calls for another one (and must not win the race).

    A transient outcome (`is_transient`), or an attempt refused before it was sent: an open
    circuit (as in .NET's hedging predicate) or a full concurrency limiter. A refused hedged
    attempt then leaves the answer to the attempt still in flight.
    """
    return is_transient(outcome) or isinstance(outcome.error, _REFUSED)


@dataclass(frozen=True, slots=True, kw_only=True)
class HttpHedgingStrategyOptions:
    """Options of the HTTP hedging (`http_hedging_strategy(...)`); validated at `build()`."""

    max_hedged_attempts: int = 1
    delay: Duration = 2.0
    delay_generator: Callable[[HedgingDelayArguments], float | dt.timedelta | None] | None = None
    handle: Callable[[Outcome[Any]], bool] | None = None
    hedge_unsafe_methods: bool = False
    on_hedging: Callable[[OnHedgingArguments], object] | None = None
    name: str = "Hedging"

    def _hedging(self) -> HedgingStrategyOptions:
        return passed_on(self, HedgingStrategyOptions, handle=self.handle or is_hedgeable)

    def validate(self, context: StrategyBuildContext, /) -> Iterable[str]:
        """Every problem with these options, as `"<option>: <what>"`."""
        problems = Problems()
        problems.boolean("hedge_unsafe_methods", self.hedge_unsafe_methods)
        return [*self._hedging().validate(context), *problems.items]

    def create(self, context: StrategyBuildContext, /) -> HttpHedging:
        """A hedging strategy for the requests that may be sent twice."""
        hedging = self._hedging().create(context).last_outcome_wins()  # earlier responses are closed by then
        return HttpHedging(hedging, unsafe_methods=self.hedge_unsafe_methods)


class HttpHedging:
    """The hedging strategy, for the requests that may be sent more than once; others pass through."""

    __slots__ = ("_hedging", "_unsafe")

    def __init__(self, hedging: HedgingStrategy, *, unsafe_methods: bool) -> None:
        self._hedging = hedging
        self._unsafe = unsafe_methods

    def _hedged(self) -> bool:
        return retry_allowed(current_request(), unsafe_methods=self._unsafe)

    def execute(self, callback: Callable[[ResilienceContext], T], context: ResilienceContext, /) -> T:
        """Hedge `callback` with abortable attempts, or run it once if the request must not be repeated (sync)."""
        if not self._hedged():
            return callback(context)
        token = ABORTABLE.set(True)  # copied into every attempt's context by the hedging strategy
        try:
            return self._hedging.execute(callback, context)
        finally:
            ABORTABLE.reset(token)

    async def execute_async(
        self, callback: Callable[[ResilienceContext], Awaitable[T]], context: ResilienceContext, /
    ) -> T:
        """Hedge `callback`, or await it once if the request must not be repeated (async)."""
        if not self._hedged():
            return await callback(context)
        return await self._hedging.execute_async(callback, context)

    def __repr__(self) -> str:
        return f"<HttpHedging {self._hedging!r} unsafe_methods={self._unsafe}>"


def http_hedging_strategy(
    *,
    max_hedged_attempts: int = 1,
    delay: Duration = 2.0,
    delay_generator: Callable[[HedgingDelayArguments], float | dt.timedelta | None] | None = None,
    handle: Callable[[Outcome[Any]], bool] | None = None,
    hedge_unsafe_methods: bool = False,
    on_hedging: Callable[[OnHedgingArguments], object] | None = None,
    name: str = "Hedging",
) -> HttpHedgingStrategyOptions:
    """Send the request again when it is slow (`delay`) or failed transiently; the first good answer wins.

    Up to `max_hedged_attempts` (1-10) more attempts, as `hedging_strategy`. `handle(outcome)`
    says which outcomes call for another attempt (default `is_hedgeable`: transport errors,
    attempt timeouts, 408, 429, 5xx and an open circuit). Only requests that are safe to send
    twice are hedged: idempotent methods, unless `hedge_unsafe_methods`, an `Idempotency-Key`
    header or the request's `RETRY_EXTENSION` says otherwise; any other request is sent once.
    The losers' responses are closed; a sync loser is abandoned at once (its response is
    closed when it arrives) so the winner is returned without waiting for it.
    """
    return HttpHedgingStrategyOptions(**locals())
