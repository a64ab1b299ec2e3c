""".NET's standard HTTP pipelines, with their defaults.

`standard_pipeline` (`AddStandardResilienceHandler`), outermost first: concurrency limiter
(1000 requests in flight), total request timeout (30 s), retry (3, exponential with jitter from
2 s, `Retry-After` honoured, idempotent methods only), circuit breaker per authority (10%
failures over 30 s with at least 100 requests, 5 s break), attempt timeout (10 s).

`standard_hedging_pipeline` (`AddStandardHedgingHandler`): total request timeout (30 s),
hedging (1 more attempt after 2 s or a transient failure, idempotent methods only), then for
each attempt the "endpoint" strategies: concurrency limiter (1000 attempts in flight per
authority), circuit breaker per authority, attempt timeout (10 s).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from resilience._builder import ResiliencePipelineBuilder
from resilience.http._classify import REQUEST
from resilience.http._hedging import http_hedging_strategy
from resilience.http._strategies import http_circuit_breaker_strategy, http_retry_strategy, http_timeout_strategy

if TYPE_CHECKING:
    from collections.abc import Callable

    from resilience._context import ResilienceContext
    from resilience._pipeline import ResiliencePipeline
    from resilience._time import TimeProvider
    from resilience._validation import Duration
    from resilience.strategies._base import StrategyOptions
    from resilience.strategies.circuit._controller import CircuitBreakerManualControl
    from resilience.strategies.hedging._strategy import OnHedgingArguments
    from resilience.strategies.retry._strategy import OnRetryArguments
    from resilience.telemetry._options import TelemetryOptions

__all__ = ["request_authority", "standard_hedging_pipeline", "standard_pipeline"]


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
    idempotent methods unless `retry_unsafe_methods`; a delay that would outlast the total
    timeout is not waited: the last response is returned at once, readable),
    `CircuitBreaker` (one circuit per authority: `failure_ratio`, `minimum_throughput`,
    `sampling_duration`, `break_duration`, `manual_control`), `AttemptTimeout`
    (`attempt_timeout`). Transient outcomes are transport errors, attempt timeouts, 408, 429
    and 5xx. Every option is validated at once (`ValidationError`).

    Outermost of all, as in .NET, `ConcurrencyLimiter`: at most `max_concurrency` requests in
    flight (no queue; beyond it `RateLimiterRejectedError`, None: no limit). `rate_limit` adds a
    `RateLimiter` of that many requests per second (token bucket) on request.
    """
    builder = ResiliencePipelineBuilder(name=name, time_provider=time_provider, telemetry=telemetry)
    if max_concurrency is not None:
        builder.add_concurrency_limiter(max_concurrency)
    if rate_limit is not None:
        builder.add_rate_limiter(rate_limit, per=1.0)
    builder.add(http_timeout_strategy(total_timeout, name="TotalTimeout")).add(
        http_retry_strategy(
            max_retries=max_retries,
            delay=retry_delay,
            max_delay=max_retry_delay,
            retry_unsafe_methods=retry_unsafe_methods,
            on_retry=on_retry,
        )
    )
    circuit = http_circuit_breaker_strategy(
        failure_ratio=failure_ratio,
        minimum_throughput=minimum_throughput,
        sampling_duration=sampling_duration,
        break_duration=break_duration,
        manual_control=manual_control,
    )
    return _with_endpoint(builder, circuit, attempt_timeout)


def _with_endpoint(
    builder: ResiliencePipelineBuilder, circuit: StrategyOptions, attempt_timeout: Duration
) -> ResiliencePipeline:
    """The innermost strategies of both standard pipelines: the authority's circuit, then the attempt's timeout."""
    return builder.add(circuit).add(http_timeout_strategy(attempt_timeout, name="AttemptTimeout")).build()


def request_authority(_context: ResilienceContext) -> str:
    """The authority (`"https://example.com:443"`) of the request being sent: a per-authority limiter key."""
    sending = REQUEST.get()
    return "" if sending is None else sending[1]


def standard_hedging_pipeline(
    *,
    name: str | None = None,
    time_provider: TimeProvider | None = None,
    telemetry: TelemetryOptions | None = None,
    total_timeout: Duration = 30.0,
    attempt_timeout: Duration = 10.0,
    max_hedged_attempts: int = 1,
    hedging_delay: Duration = 2.0,
    hedge_unsafe_methods: bool = False,
    failure_ratio: float = 0.1,
    minimum_throughput: int = 100,
    sampling_duration: Duration = 30.0,
    break_duration: Duration = 5.0,
    manual_control: CircuitBreakerManualControl | None = None,
    on_hedging: Callable[[OnHedgingArguments], object] | None = None,
    max_concurrency: int | None = 1000,
) -> ResiliencePipeline:
    """The pipeline of .NET's `AddStandardHedgingHandler`, for `ResilientTransport`.

    Outermost first: `TotalTimeout` (`total_timeout`), `Hedging` (up to `max_hedged_attempts`
    more attempts, each sent when the previous one has not answered within `hedging_delay` or
    failed transiently; the first good answer wins and the others are abandoned and closed;
    only idempotent methods unless `hedge_unsafe_methods`), then around each attempt the
    endpoint strategies: `ConcurrencyLimiter` (at most `max_concurrency` attempts in flight
    per authority, no queue; None: no limit), `CircuitBreaker` (one circuit per authority:
    `failure_ratio`, `minimum_throughput`, `sampling_duration`, `break_duration`,
    `manual_control`) and `AttemptTimeout` (`attempt_timeout`). Every option is validated at
    once (`ValidationError`).
    """
    builder = ResiliencePipelineBuilder(name=name, time_provider=time_provider, telemetry=telemetry)
    builder.add(http_timeout_strategy(total_timeout, name="TotalTimeout")).add(
        http_hedging_strategy(
            max_hedged_attempts=max_hedged_attempts,
            delay=hedging_delay,
            hedge_unsafe_methods=hedge_unsafe_methods,
            on_hedging=on_hedging,
        )
    )
    if max_concurrency is not None:
        builder.add_concurrency_limiter(max_concurrency, key=request_authority)
    circuit = http_circuit_breaker_strategy(
        failure_ratio=failure_ratio,
        minimum_throughput=minimum_throughput,
        sampling_duration=sampling_duration,
        break_duration=break_duration,
        manual_control=manual_control,
    )
    return _with_endpoint(builder, circuit, attempt_timeout)
