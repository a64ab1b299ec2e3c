"""`standard_pipeline`: .NET's standard resilience handler for HTTP, with its defaults.

Outermost first: concurrency limiter (1000 requests in flight), total request timeout (30 s),
retry (3, exponential with jitter from 2 s, `Retry-After` honoured, idempotent methods only),
circuit breaker per authority (10% failures over 30 s with at least 100 requests, 5 s break),
attempt timeout (10 s).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from resilience._builder import ResiliencePipelineBuilder
from resilience.http._strategies import http_circuit_breaker_strategy, http_retry_strategy, http_timeout_strategy

if TYPE_CHECKING:
    from collections.abc import Callable

    from resilience._pipeline import ResiliencePipeline
    from resilience._time import TimeProvider
    from resilience._validation import Duration
    from resilience.strategies._circuit_controller import CircuitBreakerManualControl
    from resilience.strategies._retry import OnRetryArguments
    from resilience.telemetry._options import TelemetryOptions

__all__ = ["standard_pipeline"]


def standard_pipeline(
    *,
    name: str | None = None,
    time_provider: TimeProvider | None = None,
    telemetry: TelemetryOptions | None = None,
    total_timeout: Duration = 30.0,
    attempt_timeout: Duration = 10.0,
    max_retries: int = 3,
    retry_unsafe_methods: bool = False,
    retry_delay: Duration = 2.0,
    max_retry_delay: Duration | None = None,
    failure_ratio: float = 0.1,
    minimum_throughput: int = 100,
    sampling_duration: Duration = 30.0,
    break_duration: Duration = 5.0,
    manual_control: CircuitBreakerManualControl | None = None,
    on_retry: Callable[[OnRetryArguments], object] | None = None,
    max_concurrency: int | None = 1000,
    rate_limit: int | None = None,
) -> ResiliencePipeline:
    """The pipeline of .NET's `AddStandardResilienceHandler`, for `ResilientTransport`.

    Outermost first: `TotalTimeout` (`total_timeout`), `Retry` (`max_retries`, exponential
    backoff with jitter from `retry_delay`, `Retry-After` capped by `max_retry_delay`, only
    idempotent methods unless `retry_unsafe_methods`), `CircuitBreaker` (one circuit per
    authority: `failure_ratio`, `minimum_throughput`, `sampling_duration`, `break_duration`,
    `manual_control`), `AttemptTimeout` (`attempt_timeout`). Transient outcomes are transport
    errors, attempt timeouts, 408, 429 and 5xx. Every option is validated at once
    (`ValidationError`).

    Outermost of all, as in .NET, `ConcurrencyLimiter`: at most `max_concurrency` requests in
    flight (no queue; beyond it `RateLimiterRejectedError`, None: no limit). `rate_limit` adds a
    `RateLimiter` of that many requests per second (token bucket) on request.
    """
    builder = ResiliencePipelineBuilder(name=name, time_provider=time_provider, telemetry=telemetry)
    if max_concurrency is not None:
        builder.add_concurrency_limiter(max_concurrency)
    if rate_limit is not None:
        builder.add_rate_limiter(rate_limit, per=1.0)
    return (
        builder.add(http_timeout_strategy(total_timeout, name="TotalTimeout"))
        .add(
            http_retry_strategy(
                max_retries=max_retries,
                delay=retry_delay,
                max_delay=max_retry_delay,
                retry_unsafe_methods=retry_unsafe_methods,
                on_retry=on_retry,
            )
        )
        .add(
            http_circuit_breaker_strategy(
                failure_ratio=failure_ratio,
                minimum_throughput=minimum_throughput,
                sampling_duration=sampling_duration,
                break_duration=break_duration,
                manual_control=manual_control,
            )
        )
        .add(http_timeout_strategy(attempt_timeout, name="AttemptTimeout"))
        .build()
    )
