"""Type-checked, never run: the retry, timeout and circuit breaker API as a user writes it."""

from __future__ import annotations

import datetime as dt
from typing import Any, assert_type

from resilience import Outcome, PipelineBuilder, ResiliencePipeline, ResiliencePipelineBuilder
from resilience.strategies import (
    BreakDurationGeneratorArguments,
    CircuitBreakerManualControl,
    CircuitBreakerStateProvider,
    CircuitBreakerStrategyOptions,
    CircuitState,
    OnCircuitClosedArguments,
    OnCircuitHalfOpenedArguments,
    OnCircuitOpenedArguments,
    OnRetryArguments,
    OnTimeoutArguments,
    RetryDelayArguments,
    RetryStrategyOptions,
    TimeoutGeneratorArguments,
    TimeoutStrategyOptions,
    circuit_breaker_strategy,
    retry_strategy,
    timeout_strategy,
)


def retry_after(args: RetryDelayArguments) -> float | None:
    error = args.outcome.error
    return getattr(error, "retry_after", None) if error is not None else args.backoff_delay


def log_retry(args: OnRetryArguments) -> None:
    assert_type(args.attempt, int)
    assert_type(args.delay, float)
    assert_type(args.duration, float)
    assert_type(args.outcome, Outcome[Any])


async def alog_timeout(args: OnTimeoutArguments) -> None:
    assert_type(args.timeout, float)


def per_call(args: TimeoutGeneratorArguments) -> dt.timedelta | None:
    return dt.timedelta(seconds=2) if args.context.operation_key else None


def breaks(args: BreakDurationGeneratorArguments) -> float:
    return 5.0 * (1 + args.failure_count) * args.failure_rate


def opened(args: OnCircuitOpenedArguments) -> None:
    assert_type(args.break_duration, float)
    assert_type(args.is_manual, bool)


def closed(args: OnCircuitClosedArguments) -> None: ...


def half_opened(args: OnCircuitHalfOpenedArguments) -> None: ...


def is_server_error(outcome: Outcome[Any]) -> bool:
    return outcome.is_error or outcome.value == 500


def shortcuts() -> ResiliencePipeline:
    control = CircuitBreakerManualControl()
    provider = CircuitBreakerStateProvider()
    pipeline = (
        ResiliencePipelineBuilder(name="typed")
        .add_retry(
            max_retries=3,
            delay=dt.timedelta(milliseconds=200),
            backoff="exponential",
            jitter=True,
            max_delay=10,
            handle=(ConnectionError, TimeoutError),
            handle_result=lambda status: status == 503,
            delay_generator=retry_after,
            on_retry=log_retry,
        )
        .add_timeout(10, timeout_generator=per_call, on_timeout=alog_timeout)
        .add_circuit_breaker(
            failure_ratio=0.5,
            minimum_throughput=10,
            sampling_duration=30,
            break_duration=dt.timedelta(seconds=5),
            break_duration_generator=breaks,
            handle=is_server_error,
            manual_control=control,
            state_provider=provider,
            on_opened=opened,
            on_closed=closed,
            on_half_opened=half_opened,
        )
        .build()
    )
    assert_type(provider.state, CircuitState)
    control.isolate()
    control.close()
    return pipeline


def factories() -> ResiliencePipeline:
    retry = retry_strategy(max_retries=0, handle=ValueError)
    assert_type(retry, RetryStrategyOptions)
    timeout = timeout_strategy(1.5)
    assert_type(timeout, TimeoutStrategyOptions)
    breaker = circuit_breaker_strategy(minimum_throughput=2)
    assert_type(breaker, CircuitBreakerStrategyOptions)
    return PipelineBuilder().add(retry).add(timeout).add(breaker).build()


async def async_control(control: CircuitBreakerManualControl) -> None:
    await control.isolate_async()
    await control.close_async()
