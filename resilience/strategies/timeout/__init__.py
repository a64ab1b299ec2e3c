"""Timeout: aborts the scope's signal at the deadline; sync cooperative, async by cancellation."""

from resilience.strategies.timeout._strategy import (
    OnTimeoutArguments,
    TimeoutGeneratorArguments,
    TimeoutStrategyOptions,
    timeout_strategy,
)

__all__ = [
    "OnTimeoutArguments",
    "TimeoutGeneratorArguments",
    "TimeoutStrategyOptions",
    "timeout_strategy",
]
