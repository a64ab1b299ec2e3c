"""Strategies: the `Strategy` protocol, the built-in strategies' factories and their options."""

from resilience.strategies._base import Strategy, StrategyBuildContext, StrategyOptions

__all__ = ["Strategy", "StrategyBuildContext", "StrategyOptions"]
