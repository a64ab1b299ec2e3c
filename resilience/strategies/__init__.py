"""Strategies: the `Strategy` protocol, the built-in strategies' factories and their options.

`retry_strategy`, `timeout_strategy`, `circuit_breaker_strategy`, `lock_strategy`, `rate_limiter_strategy`,
`concurrency_limiter_strategy`, `fallback_strategy` and `hedging_strategy` return immutable options
objects; `PipelineBuilder.add(...)` takes them, and `build()` validates and creates them.
"""

from resilience._context import LazyDeadline
from resilience.strategies._base import (
    DeclaresTraits,
    Strategy,
    StrategyBuildContext,
    StrategyOptions,
    StrategyTraits,
)
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
from resilience.strategies.circuit._controller import (
    BreakDurationGeneratorArguments,
    CircuitBreakerManualControl,
    CircuitBreakerStateProvider,
    OnCircuitClosedArguments,
    OnCircuitHalfOpenedArguments,
    OnCircuitOpenedArguments,
)
from resilience.strategies.circuit._core import CircuitState
from resilience.strategies.circuit._strategy import CircuitBreakerStrategyOptions, circuit_breaker_strategy
from resilience.strategies.circuit._sync import OnCircuitStateSyncFailedArguments
from resilience.strategies.fallback._strategy import (
    FallbackArguments,
    FallbackStrategyOptions,
    OnFallbackArguments,
    fallback_strategy,
)
from resilience.strategies.hedging._strategy import (
    HedgingActionArguments,
    HedgingDelayArguments,
    HedgingStrategyOptions,
    OnHedgingArguments,
    hedging_strategy,
)
from resilience.strategies.limiting._concurrency import (
    ConcurrencyLimiterStrategyOptions,
    concurrency_limiter_strategy,
)
from resilience.strategies.limiting._rate import (
    OnRateLimiterRejectedArguments,
    RateLimiterStrategyOptions,
    rate_limiter_strategy,
)
from resilience.strategies.lock._strategy import (
    LockEventArguments,
    LockStrategyOptions,
    OnLockLostArguments,
    lock_strategy,
)
from resilience.strategies.retry._strategy import (
    ExecutionAttemptArguments,
    OnRetryArguments,
    RetryDelayArguments,
    RetryStrategyOptions,
    retry_strategy,
)
from resilience.strategies.timeout._strategy import (
    OnTimeoutArguments,
    TimeoutGeneratorArguments,
    TimeoutStrategyOptions,
    timeout_strategy,
)

__all__ = [
    "BehaviorGeneratorArguments",
    "BreakDurationGeneratorArguments",
    "ChaosBehaviorStrategyOptions",
    "ChaosFaultStrategyOptions",
    "ChaosLatencyStrategyOptions",
    "ChaosOutcomeStrategyOptions",
    "CircuitBreakerManualControl",
    "CircuitBreakerStateProvider",
    "CircuitBreakerStrategyOptions",
    "CircuitState",
    "ConcurrencyLimiterStrategyOptions",
    "DeclaresTraits",
    "EnabledGeneratorArguments",
    "ExecutionAttemptArguments",
    "FallbackArguments",
    "FallbackStrategyOptions",
    "FaultGeneratorArguments",
    "HedgingActionArguments",
    "HedgingDelayArguments",
    "HedgingStrategyOptions",
    "InjectionRateGeneratorArguments",
    "LatencyGeneratorArguments",
    "LazyDeadline",
    "LockEventArguments",
    "LockStrategyOptions",
    "OnBehaviorInjectedArguments",
    "OnCircuitClosedArguments",
    "OnCircuitHalfOpenedArguments",
    "OnCircuitOpenedArguments",
    "OnCircuitStateSyncFailedArguments",
    "OnFallbackArguments",
    "OnFaultInjectedArguments",
    "OnHedgingArguments",
    "OnLatencyInjectedArguments",
    "OnLockLostArguments",
    "OnOutcomeInjectedArguments",
    "OnRateLimiterRejectedArguments",
    "OnRetryArguments",
    "OnTimeoutArguments",
    "OutcomeGeneratorArguments",
    "RateLimiterStrategyOptions",
    "RetryDelayArguments",
    "RetryStrategyOptions",
    "Strategy",
    "StrategyBuildContext",
    "StrategyOptions",
    "StrategyTraits",
    "TimeoutGeneratorArguments",
    "TimeoutStrategyOptions",
    "chaos_behavior_strategy",
    "chaos_fault_strategy",
    "chaos_latency_strategy",
    "chaos_outcome_strategy",
    "circuit_breaker_strategy",
    "concurrency_limiter_strategy",
    "fallback_strategy",
    "hedging_strategy",
    "lock_strategy",
    "rate_limiter_strategy",
    "retry_strategy",
    "timeout_strategy",
]
