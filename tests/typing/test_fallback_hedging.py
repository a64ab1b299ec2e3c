"""Type-checked, never run: the fallback and hedging API as a user writes it."""

from __future__ import annotations

from typing import Any, assert_type

from resilience import Outcome, PipelineBuilder, ResiliencePipeline, ResiliencePipelineBuilder
from resilience.strategies import (
    FallbackArguments,
    FallbackStrategyOptions,
    OnFallbackArguments,
    fallback_strategy,
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
