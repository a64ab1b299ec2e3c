"""Hedging: extra attempts when the first is slow or fails; `_core` decides, `_pool` runs sync attempts."""

from resilience.strategies.hedging._strategy import (
    HedgingActionArguments,
    HedgingDelayArguments,
    HedgingStrategyOptions,
    OnHedgingArguments,
    hedging_strategy,
)

__all__ = [
    "HedgingActionArguments",
    "HedgingDelayArguments",
    "HedgingStrategyOptions",
    "OnHedgingArguments",
    "hedging_strategy",
]
