"""Type-checked, never run: the chaos strategies as a user writes them, sync and async generators."""

from __future__ import annotations

import datetime as dt
from typing import assert_type

from resilience import Err, Ok, ResilienceContext, ResiliencePipeline, ResiliencePipelineBuilder
from resilience.strategies import (
    BehaviorGeneratorArguments,
    ChaosFaultStrategyOptions,
    ChaosLatencyStrategyOptions,
    EnabledGeneratorArguments,
    FaultGeneratorArguments,
    InjectionRateGeneratorArguments,
    OnFaultInjectedArguments,
    OnLatencyInjectedArguments,
    OutcomeGeneratorArguments,
    chaos_fault_strategy,
    chaos_latency_strategy,
)


def enabled(arguments: EnabledGeneratorArguments) -> bool:
    assert_type(arguments.context, ResilienceContext)
    return True


async def enabled_async(arguments: EnabledGeneratorArguments) -> bool:
    return arguments.context.operation_key == "canary"


async def rate(arguments: InjectionRateGeneratorArguments) -> float:
    return 0.5


def fault(arguments: FaultGeneratorArguments) -> Exception | None:
    return ConnectionError(arguments.context.operation_key)


def on_fault(arguments: OnFaultInjectedArguments) -> None:
    assert_type(arguments.fault, Exception)


def on_latency(arguments: OnLatencyInjectedArguments) -> None:
    assert_type(arguments.latency, float)


async def outcome(arguments: OutcomeGeneratorArguments) -> Ok[str] | None:
    return Ok("canned")


async def behavior(arguments: BehaviorGeneratorArguments) -> None:
    return None


def build() -> ResiliencePipeline:
    options = chaos_fault_strategy(fault=ValueError, injection_rate=0.1, enabled_generator=enabled)
    assert_type(options, ChaosFaultStrategyOptions)
    latency = chaos_latency_strategy(latency=dt.timedelta(milliseconds=50), injection_rate_generator=rate)
    assert_type(latency, ChaosLatencyStrategyOptions)
    return (
        ResiliencePipelineBuilder()
        .add(options)
        .add(latency)
        .add_chaos_fault(fault_generator=fault, on_fault_injected=on_fault, enabled_generator=enabled_async)
        .add_chaos_latency(latency=0.2, latency_generator=lambda _arguments: None, on_latency_injected=on_latency)
        .add_chaos_outcome(outcome=Err(TimeoutError()), injection_rate=0.01)
        .add_chaos_outcome(outcome_generator=outcome)
        .add_chaos_behavior(behavior=behavior, enabled=False)
        .build()
    )
