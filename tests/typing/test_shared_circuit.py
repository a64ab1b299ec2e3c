"""Type-checked, never run: a circuit shared through Redis, as a user writes it."""

from __future__ import annotations

import datetime as dt
from typing import assert_type

import redis
import redis.asyncio

from resilience import ResiliencePipeline, ResiliencePipelineBuilder
from resilience.stores import RedisCircuitStateStore
from resilience.strategies import (
    CircuitBreakerStrategyOptions,
    OnCircuitStateSyncFailedArguments,
    circuit_breaker_strategy,
)
from resilience.telemetry import TelemetryEvent


def shared(client: redis.Redis, aclient: redis.asyncio.Redis) -> None:
    store = RedisCircuitStateStore(client, async_client=aclient, prefix="circuits")
    assert_type(store.key("payments"), str)
    pipeline = (
        ResiliencePipelineBuilder(name="payments")
        .add_circuit_breaker(state_store=store, circuit_key="payments-api", sync_interval=dt.timedelta(seconds=0.1))
        .build()
    )
    assert_type(pipeline, ResiliencePipeline)
    options = circuit_breaker_strategy(state_store=RedisCircuitStateStore(redis.Redis), sync_interval=0.05)
    assert_type(options, CircuitBreakerStrategyOptions)
    assert_type(options.circuit_key, str | None)


def listener(event: TelemetryEvent) -> None:
    if isinstance(event.arguments, OnCircuitStateSyncFailedArguments):
        assert_type(event.arguments.circuit_key, str)
        assert_type(event.arguments.error, Exception)
