"""Circuit breaker: `_core` is the pure state machine, `_controller` its shell, `_strategy` the options.

`_fleet` and `_sync` share one circuit across processes through a `RedisCircuitStateStore`.
"""

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

__all__ = [
    "BreakDurationGeneratorArguments",
    "CircuitBreakerManualControl",
    "CircuitBreakerStateProvider",
    "CircuitBreakerStrategyOptions",
    "CircuitState",
    "OnCircuitClosedArguments",
    "OnCircuitHalfOpenedArguments",
    "OnCircuitOpenedArguments",
    "OnCircuitStateSyncFailedArguments",
    "circuit_breaker_strategy",
]
