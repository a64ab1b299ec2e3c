"""Retry: Polly's retry strategy; `_core` decides the delays (pure), `_strategy` performs them."""

from resilience.strategies.retry._strategy import (
    ExecutionAttemptArguments,
    OnRetryArguments,
    RetryDelayArguments,
    RetryStrategyOptions,
    retry_strategy,
)

__all__ = [
    "ExecutionAttemptArguments",
    "OnRetryArguments",
    "RetryDelayArguments",
    "RetryStrategyOptions",
    "retry_strategy",
]
