"""Type-checked, never run: the rate limiter and its stores as a user writes them."""

from __future__ import annotations

from typing import Any, assert_type

from resilience import RateLimiterRejectedError, ResilienceContext, ResiliencePipelineBuilder
from resilience.limiters import (
    AsyncRateLimitStore,
    MemoryRateLimitStore,
    RateLimitAlgorithm,
    RateLimitStore,
    RedisRateLimitStore,
)
from resilience.strategies import OnRateLimiterRejectedArguments, RateLimiterStrategyOptions, rate_limiter_strategy


def tenant(context: ResilienceContext) -> str:
    return f"tenant:{context.operation_key}"


def rejected(args: OnRateLimiterRejectedArguments) -> None:
    assert_type(args.key, str)
    assert_type(args.retry_after, float | None)
    assert_type(args.context, ResilienceContext)


def build(client: Any) -> None:
    algorithm: RateLimitAlgorithm = "sliding_window"
    store: RateLimitStore = MemoryRateLimitStore()
    async_store: AsyncRateLimitStore = RedisRateLimitStore(async_client=client)
    options = rate_limiter_strategy(10, per=1.0, algorithm=algorithm, key=tenant, on_rejected=rejected)
    assert_type(options, RateLimiterStrategyOptions)
    ResiliencePipelineBuilder().add_rate_limiter(100, burst=20, store=store, wait=0.5).build()
    ResiliencePipelineBuilder().add_rate_limiter(100, store=async_store).add(options).build()
    wait: float = store.take("k", 10, 1.0)
    assert_type(wait, float)
    error = RateLimiterRejectedError("k", 0.5)
    assert_type(error.retry_after, float | None)
    assert_type(error.key, str)
