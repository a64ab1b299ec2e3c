"""Chaos (Simmy): fault, latency, outcome and behaviour injection.

`_shortcuts` holds the `add_chaos_*` builder methods.
"""

from resilience.strategies.chaos._strategy import (
    BehaviorGeneratorArguments,
    ChaosBehaviorStrategyOptions,
    ChaosFaultStrategyOptions,
    ChaosLatencyStrategyOptions,
    ChaosOutcomeStrategyOptions,
    EnabledGeneratorArguments,
    FaultGeneratorArguments,
    InjectionRateGeneratorArguments,
    LatencyGeneratorArguments,
    OnBehaviorInjectedArguments,
    OnFaultInjectedArguments,
    OnLatencyInjectedArguments,
    OnOutcomeInjectedArguments,
    OutcomeGeneratorArguments,
    chaos_behavior_strategy,
    chaos_fault_strategy,
    chaos_latency_strategy,
    chaos_outcome_strategy,
)

__all__ = [
    "BehaviorGeneratorArguments",
    "ChaosBehaviorStrategyOptions",
    "ChaosFaultStrategyOptions",
    "ChaosLatencyStrategyOptions",
    "ChaosOutcomeStrategyOptions",
    "EnabledGeneratorArguments",
    "FaultGeneratorArguments",
    "InjectionRateGeneratorArguments",
    "LatencyGeneratorArguments",
    "OnBehaviorInjectedArguments",
    "OnFaultInjectedArguments",
    "OnLatencyInjectedArguments",
    "OnOutcomeInjectedArguments",
    "OutcomeGeneratorArguments",
    "chaos_behavior_strategy",
    "chaos_fault_strategy",
    "chaos_latency_strategy",
    "chaos_outcome_strategy",
]
