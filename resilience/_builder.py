"""`PipelineBuilder` and `ResiliencePipelineBuilder`: compose strategies, validate at `build()`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Self

from resilience._pipeline import ResiliencePipeline
from resilience._time import SYSTEM_TIME, TimeProvider
from resilience._validation import Duration, Problems
from resilience.exceptions import ValidationError
from resilience.strategies._base import Strategy, StrategyBuildContext, StrategyOptions, traits_of
from resilience.strategies.chaos._shortcuts import ChaosShortcuts  # the add_chaos_* shortcuts (issue #18)

# -- lock (issue #4) --------------------------------------------------------------------------
from resilience.strategies.lock._strategy import lock_strategy
from resilience.telemetry._options import TelemetryOptions
from resilience.telemetry._source import TelemetrySource

if TYPE_CHECKING:
    import datetime as dt
    from collections.abc import Callable

    from resilience._context import ResilienceContext
    from resilience.limiters._algorithms import RateLimitAlgorithm
    from resilience.limiters._protocols import AsyncRateLimitStore, RateLimitStore
    from resilience.stores._protocols import AsyncLockStore, AsyncSemaphoreStore, LockStore, SemaphoreStore
    from resilience.stores._redis_circuit import RedisCircuitStateStore
    from resilience.strategies._common import Handle
    from resilience.strategies.circuit._controller import (
        BreakDurationGeneratorArguments,
        CircuitBreakerManualControl,
        CircuitBreakerStateProvider,
        OnCircuitClosedArguments,
        OnCircuitHalfOpenedArguments,
        OnCircuitOpenedArguments,
    )
    from resilience.strategies.fallback._strategy import FallbackArguments, OnFallbackArguments
    from resilience.strategies.hedging._strategy import (
        HedgingActionArguments,
        HedgingDelayArguments,
        OnHedgingArguments,
    )
    from resilience.strategies.limiting._rate import OnRateLimiterRejectedArguments
    from resilience.strategies.lock._strategy import OnLockLostArguments
    from resilience.strategies.retry._core import Backoff
    from resilience.strategies.retry._strategy import OnRetryArguments, RetryDelayArguments
    from resilience.strategies.timeout._strategy import OnTimeoutArguments, TimeoutGeneratorArguments

__all__ = ["PipelineBuilder", "ResiliencePipelineBuilder"]


class PipelineBuilder:
    """Collects strategies, first added = outermost, and builds pipelines from them.

    Nothing is validated or created before `build()`, which may be called any number of
    times: each call validates every option of every strategy (raising one `ValidationError`
    listing every problem) and creates fresh strategy state.
    """

    def __init__(
        self,
        *,
        name: str | None = None,
        instance_name: str | None = None,
        time_provider: TimeProvider | None = None,
        telemetry: TelemetryOptions | None = None,
    ) -> None:
        self._name = name
        self._instance_name = instance_name
        self._time_provider = time_provider
        self._telemetry = telemetry
        self._strategies: list[StrategyOptions | Strategy] = []

    def add(self, strategy: StrategyOptions | Strategy, /) -> Self:
        """Append a strategy (its options, e.g. `retry_strategy(...)`, or a ready `Strategy`)."""
        self._strategies.append(strategy)
        return self

    def build(self) -> ResiliencePipeline:
        """Validate everything and return a new pipeline with fresh strategy state."""
        problems = Problems("Pipeline.")
        problems.name("name", self._name, allow_none=True)
        problems.name("instance_name", self._instance_name, allow_none=True)
        time_provider: object = self._time_provider or SYSTEM_TIME
        if not isinstance(time_provider, TimeProvider):
            problems.add("time_provider", f"must implement TimeProvider, got {time_provider!r}")
            time_provider = SYSTEM_TIME
        telemetry: object = self._telemetry
        if telemetry is not None and not isinstance(telemetry, TelemetryOptions):
            problems.add("telemetry", f"must be a TelemetryOptions, got {telemetry!r}")
            telemetry = None
        source = TelemetrySource(telemetry, pipeline_name=self._name, pipeline_instance=self._instance_name)

        planned: list[Strategy | tuple[StrategyOptions, StrategyBuildContext]] = []
        candidates: list[object] = list(self._strategies)  # checked: callers may ignore the types
        for position, item in enumerate(candidates):
            if isinstance(item, StrategyOptions):
                context = StrategyBuildContext(
                    pipeline_name=self._name,
                    pipeline_instance=self._instance_name,
                    time_provider=time_provider,
                    telemetry=source.for_strategy(item.name),
                )
                problems.items.extend(f"{item.name}.{problem}" for problem in item.validate(context))
                planned.append((item, context))
            elif isinstance(item, Strategy):
                planned.append(item)
            else:
                problems.add(f"strategies[{position}]", f"must be strategy options or a Strategy, got {item!r}")
        if problems.items:
            raise ValidationError(problems.items)
        strategies = [entry[0].create(entry[1]) if isinstance(entry, tuple) else entry for entry in planned]
        # A strategy that can never act (switched-off chaos) is left out: it then costs nothing.
        strategies = [strategy for strategy in strategies if not traits_of(strategy).inert]
        return ResiliencePipeline(
            strategies,
            name=self._name,
            instance_name=self._instance_name,
            time_provider=time_provider,
            telemetry=source,
        )


class ResiliencePipelineBuilder(PipelineBuilder, ChaosShortcuts):
    """`PipelineBuilder` with Polly-style shortcuts: `add_retry`, `add_timeout`, ... .

    Each shortcut is exactly `.add(x_strategy(...))` with the same signature.
    """

    def add_retry(
        self,
        *,
        max_retries: int = 3,
        delay: Duration = 2.0,
        backoff: Backoff = "constant",
        jitter: bool = False,
        max_delay: Duration | None = None,
        handle: Handle = None,
        handle_result: Callable[[Any], bool] | None = None,
        delay_generator: Callable[[RetryDelayArguments], float | dt.timedelta | None] | None = None,
        on_retry: Callable[[OnRetryArguments], object] | None = None,
        name: str = "Retry",
    ) -> Self:
        """`.add(retry_strategy(...))`: retry handled failures (see `retry_strategy`)."""
        from resilience.strategies.retry._strategy import retry_strategy

        return self.add(
            retry_strategy(
                max_retries=max_retries,
                delay=delay,
                backoff=backoff,
                jitter=jitter,
                max_delay=max_delay,
                handle=handle,
                handle_result=handle_result,
                delay_generator=delay_generator,
                on_retry=on_retry,
                name=name,
            )
        )

    def add_timeout(
        self,
        timeout: Duration = 30.0,
        /,
        *,
        timeout_generator: Callable[[TimeoutGeneratorArguments], float | dt.timedelta | None] | None = None,
        on_timeout: Callable[[OnTimeoutArguments], object] | None = None,
        name: str = "Timeout",
    ) -> Self:
        """`.add(timeout_strategy(...))`: abort the inner part after `timeout` (see `timeout_strategy`)."""
        from resilience.strategies.timeout._strategy import timeout_strategy

        return self.add(
            timeout_strategy(timeout, timeout_generator=timeout_generator, on_timeout=on_timeout, name=name)
        )

    def add_circuit_breaker(
        self,
        *,
        failure_ratio: float = 0.1,
        minimum_throughput: int = 100,
        sampling_duration: Duration = 30.0,
        break_duration: Duration = 5.0,
        break_duration_generator: Callable[[BreakDurationGeneratorArguments], float | dt.timedelta] | None = None,
        handle: Handle = None,
        manual_control: CircuitBreakerManualControl | None = None,
        state_provider: CircuitBreakerStateProvider | None = None,
        on_opened: Callable[[OnCircuitOpenedArguments], object] | None = None,
        on_closed: Callable[[OnCircuitClosedArguments], object] | None = None,
        on_half_opened: Callable[[OnCircuitHalfOpenedArguments], object] | None = None,
        state_store: RedisCircuitStateStore | None = None,
        circuit_key: str | None = None,
        sync_interval: Duration = 0.1,
        name: str = "CircuitBreaker",
    ) -> Self:
        """`.add(circuit_breaker_strategy(...))`: Polly's advanced circuit breaker, local or shared by a fleet."""
        from resilience.strategies.circuit._strategy import circuit_breaker_strategy

        return self.add(
            circuit_breaker_strategy(
                failure_ratio=failure_ratio,
                minimum_throughput=minimum_throughput,
                sampling_duration=sampling_duration,
                break_duration=break_duration,
                break_duration_generator=break_duration_generator,
                handle=handle,
                manual_control=manual_control,
                state_provider=state_provider,
                on_opened=on_opened,
                on_closed=on_closed,
                on_half_opened=on_half_opened,
                state_store=state_store,
                circuit_key=circuit_key,
                sync_interval=sync_interval,
                name=name,
            )
        )

    # -- lock (issue #4) ----------------------------------------------------------------------

    def add_lock(
        self,
        key: str | Callable[[ResilienceContext], str],
        /,
        *,
        ttl: Duration = 30.0,
        wait: Duration = 0.0,
        store: LockStore | AsyncLockStore | None = None,
        on_lock_lost: Callable[[OnLockLostArguments], object] | None = None,
        cancel_on_lost: bool = False,
        name: str = "Lock",
    ) -> Self:
        """Add a lock strategy: `.add(lock_strategy(key, ...))` (see `lock_strategy`)."""
        return self.add(
            lock_strategy(
                key,
                ttl=ttl,
                wait=wait,
                store=store,
                on_lock_lost=on_lock_lost,
                cancel_on_lost=cancel_on_lost,
                name=name,
            )
        )

    # -- rate limiter (issue #16) -------------------------------------------------------------

    def add_rate_limiter(
        self,
        limit: int,
        /,
        *,
        per: Duration = 1.0,
        burst: int | None = None,
        algorithm: RateLimitAlgorithm = "token_bucket",
        key: str | Callable[[ResilienceContext], str] = "",
        store: RateLimitStore | AsyncRateLimitStore | None = None,
        wait: Duration = 0.0,
        on_rejected: Callable[[OnRateLimiterRejectedArguments], object] | None = None,
        name: str = "RateLimiter",
    ) -> Self:
        """`.add(rate_limiter_strategy(limit, ...))`: at most `limit` executions per `per` seconds, per key."""
        from resilience.strategies.limiting._rate import rate_limiter_strategy

        return self.add(
            rate_limiter_strategy(
                limit,
                per=per,
                burst=burst,
                algorithm=algorithm,
                key=key,
                store=store,
                wait=wait,
                on_rejected=on_rejected,
                name=name,
            )
        )

    def add_concurrency_limiter(
        self,
        limit: int,
        /,
        *,
        key: str | Callable[[ResilienceContext], str] = "",
        store: SemaphoreStore | AsyncSemaphoreStore | None = None,
        ttl: Duration = 30.0,
        wait: Duration = 0.0,
        queue: int = 0,
        on_rejected: Callable[[OnRateLimiterRejectedArguments], object] | None = None,
        name: str = "ConcurrencyLimiter",
    ) -> Self:
        """`.add(concurrency_limiter_strategy(limit, ...))`: at most `limit` executions at once, per key."""
        from resilience.strategies.limiting._concurrency import concurrency_limiter_strategy

        return self.add(
            concurrency_limiter_strategy(
                limit, key=key, store=store, ttl=ttl, wait=wait, queue=queue, on_rejected=on_rejected, name=name
            )
        )

    # -- fallback and hedging (issue #15) -----------------------------------------------------

    def add_fallback(
        self,
        fallback: Callable[[FallbackArguments], Any],
        /,
        *,
        handle: Handle = None,
        handle_result: Callable[[Any], bool] | None = None,
        on_fallback: Callable[[OnFallbackArguments], object] | None = None,
        name: str = "Fallback",
    ) -> Self:
        """`.add(fallback_strategy(...))`: a substitute for handled outcomes (see `fallback_strategy`)."""
        from resilience.strategies.fallback._strategy import fallback_strategy

        return self.add(
            fallback_strategy(fallback, handle=handle, handle_result=handle_result, on_fallback=on_fallback, name=name)
        )

    def add_hedging(
        self,
        *,
        max_hedged_attempts: int = 1,
        delay: Duration = 2.0,
        delay_generator: Callable[[HedgingDelayArguments], float | dt.timedelta | None] | None = None,
        action_generator: Callable[[HedgingActionArguments], Callable[..., Any] | None] | None = None,
        handle: Handle = None,
        handle_result: Callable[[Any], bool] | None = None,
        on_hedging: Callable[[OnHedgingArguments], object] | None = None,
        name: str = "Hedging",
    ) -> Self:
        """`.add(hedging_strategy(...))`: extra attempts, the first acceptable outcome wins (see `hedging_strategy`)."""
        from resilience.strategies.hedging._strategy import hedging_strategy

        return self.add(
            hedging_strategy(
                max_hedged_attempts=max_hedged_attempts,
                delay=delay,
                delay_generator=delay_generator,
                action_generator=action_generator,
                handle=handle,
                handle_result=handle_result,
                on_hedging=on_hedging,
                name=name,
            )
        )
