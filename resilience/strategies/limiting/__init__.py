"""Rate and concurrency limiters.

`_rate` asks a `RateLimitStore` per decision; `_concurrency` holds permits in process (`_permits`) or
as leases on a semaphore store (`_leased_permits`).
"""

from resilience.strategies.limiting._concurrency import ConcurrencyLimiterStrategyOptions, concurrency_limiter_strategy
from resilience.strategies.limiting._rate import (
    OnRateLimiterRejectedArguments,
    RateLimiterStrategyOptions,
    rate_limiter_strategy,
)

__all__ = [
    "ConcurrencyLimiterStrategyOptions",
    "OnRateLimiterRejectedArguments",
    "RateLimiterStrategyOptions",
    "concurrency_limiter_strategy",
    "rate_limiter_strategy",
]
