"""Strategies: the `Strategy` protocol, the built-in strategies' factories and their options."""

from resilience.strategies._base import Strategy, StrategyBuildContext, StrategyOptions

# -- lock (issue #4) --------------------------------------------------------------------------
from resilience.strategies._lock import (
    LockEventArguments,
    LockStrategyOptions,
    OnLockLostArguments,
    lock_strategy,
)

__all__ = [
    "LockEventArguments",
    "LockStrategyOptions",
    "OnLockLostArguments",
    "Strategy",
    "StrategyBuildContext",
    "StrategyOptions",
    "lock_strategy",
]
