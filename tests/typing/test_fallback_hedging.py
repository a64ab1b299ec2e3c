"""Type-checked, never run: the fallback and hedging API as a user writes it."""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Awaitable, Callable
from typing import Any, assert_type

from resilience import Outcome, PipelineBuilder, ResilienceContext, ResiliencePipeline, ResiliencePipelineBuilder
from resilience.strategies import (
    FallbackArguments,
    FallbackStrategyOptions,
    HedgingActionArguments,
    HedgingDelayArguments,
    HedgingStrategyOptions,
    OnFallbackArguments,
    OnHedgingArguments,
    fallback_strategy,
    hedging_strategy,
)


def from_cache(args: FallbackArguments) -> str:
    assert_type(args.outcome, Outcome[Any])
    return "cached"


async def afrom_cache(args: FallbackArguments) -> str:
    return f"cached after {args.outcome.error!r}"


def log_fallback(args: OnFallbackArguments) -> None:
    assert_type(args.outcome, Outcome[Any])


def fallbacks() -> ResiliencePipeline:
    options = fallback_strategy(from_cache, handle=(ConnectionError, TimeoutError), on_fallback=log_fallback)
    assert_type(options, FallbackStrategyOptions)
    shortcut = (
        ResiliencePipelineBuilder()
        .add_fallback(afrom_cache, handle_result=lambda status: status == 503, name="Cache")
        .build()
    )
    assert_type(shortcut, ResiliencePipeline)
    return PipelineBuilder().add(options).build()


def hedge_delay(args: HedgingDelayArguments) -> dt.timedelta | None:
    assert_type(args.attempt, int)
    return dt.timedelta(milliseconds=50) if args.attempt == 1 else None


async def replica_a(key: str) -> bytes:
    return key.encode()


async def replica_b(key: str) -> bytes:
    return key.encode()


def other_replica(args: HedgingActionArguments) -> Callable[[str], Awaitable[bytes]] | None:
    assert_type(args.attempt, int)
    assert_type(args.context, ResilienceContext)
    return replica_b if args.callback is replica_a else None


async def log_hedging(args: OnHedgingArguments) -> None:
    assert_type(args.duration, float)


async def hedges() -> bytes:
    options = hedging_strategy(max_hedged_attempts=2, delay=0.05, handle=ConnectionError)
    assert_type(options, HedgingStrategyOptions)
    pipeline = (
        ResiliencePipelineBuilder()
        .add_hedging(
            max_hedged_attempts=3,
            delay=math.inf,
            delay_generator=hedge_delay,
            action_generator=other_replica,
            handle_result=lambda data: not data,
            on_hedging=log_hedging,
            name="Replicas",
        )
        .build()
    )
    PipelineBuilder().add(options).build()
    data = await pipeline.execute_async(replica_a, "key")
    assert_type(data, bytes)
    return data
