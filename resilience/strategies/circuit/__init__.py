"""Circuit breaker: `_core` is the pure state machine, `_controller` its shell, `_strategy` the options.

`_fleet` and `_sync` share one circuit across processes through a `RedisCircuitStateStore`.
"""
