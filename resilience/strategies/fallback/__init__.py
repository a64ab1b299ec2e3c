"""Fallback: a substitute value or call when the outcome is handled."""

from resilience.strategies.fallback._strategy import (
    FallbackArguments,
    FallbackStrategyOptions,
    OnFallbackArguments,
    fallback_strategy,
)

__all__ = [
    "FallbackArguments",
    "FallbackStrategyOptions",
    "OnFallbackArguments",
    "fallback_strategy",
]
