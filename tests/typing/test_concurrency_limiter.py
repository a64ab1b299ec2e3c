"""Type-checked, never run: the concurrency limiter as a user writes it."""

from __future__ import annotations

from typing import Any, assert_type

from resilience import ResilienceContext, ResiliencePipelineBuilder
from resilience.stores import MemorySemaphoreStore, RedisSemaphoreStore
from resilience.strategies import (
    ConcurrencyLimiterStrategyOptions,
    OnRateLimiterRejectedArguments,
    concurrency_limiter_strategy,
)


def tenant(context: ResilienceContext) -> str:
    return f"jobs:{context.operation_key}"


def rejected(args: OnRateLimiterRejectedArguments) -> None:
    assert_type(args.retry_after, float | None)


def build(client: Any) -> None:
    options = concurrency_limiter_strategy(4, key=tenant, queue=10, wait=2.5, on_rejected=rejected)
    assert_type(options, ConcurrencyLimiterStrategyOptions)
    ResiliencePipelineBuilder().add(options).build()
    ResiliencePipelineBuilder().add_concurrency_limiter(
        8, key="reports", store=RedisSemaphoreStore(client), ttl=30, wait=5
    )
    ResiliencePipelineBuilder().add_concurrency_limiter(2, store=MemorySemaphoreStore()).build()
