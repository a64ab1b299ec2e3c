"""Retry, timeout and circuit breaker composed in both orders, sync and async alike."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

import pytest

from resilience import BrokenCircuitError, ResiliencePipelineBuilder, TimeoutRejectedError
from resilience.strategies import CircuitBreakerStateProvider, CircuitState
from resilience.telemetry import TelemetryEvent, TelemetryOptions
from tests.unit.modes import run

if TYPE_CHECKING:
    from resilience.testing import FakeTimeProvider


@pytest.mark.parametrize("mode", ["sync", "async"])
async def test_retry_outside_breaker_outside_timeout(auto_clock: FakeTimeProvider, mode: str) -> None:
    """Retry outermost: breaker rejections are retried until the break ends and a probe succeeds."""
    events: list[TelemetryEvent] = []
    provider = CircuitBreakerStateProvider()
    pipeline = (
        ResiliencePipelineBuilder(time_provider=auto_clock, telemetry=TelemetryOptions(listeners=[events.append]))
        .add_retry(max_retries=5, delay=2.0)
        .add_circuit_breaker(minimum_throughput=2, failure_ratio=0.5, break_duration=3.0, state_provider=provider)
        .add_timeout(1.0)
        .build()
    )
    calls: list[float] = []

    def flaky() -> str:
        calls.append(auto_clock.monotonic())
        if len(calls) <= 2:
            raise ConnectionError
        return "ok"

    assert await run(pipeline, flaky, mode) == "ok"
    assert calls == [0.0, 2.0, 6.0]  # attempt 2 at t=4 was rejected by the open circuit
    names = [e.name for e in events if e.strategy_name]
    assert names.count("OnRetry") == 3
    assert names.index("OnCircuitOpened") < names.index("OnCircuitHalfOpened") < names.index("OnCircuitClosed")
    assert provider.state is CircuitState.CLOSED


async def test_timeouts_are_retried_and_counted_by_the_breaker(auto_clock: FakeTimeProvider) -> None:
    """Retry → breaker → timeout: each timed-out attempt is a handled failure of the breaker."""
    provider = CircuitBreakerStateProvider()
    pipeline = (
        ResiliencePipelineBuilder(time_provider=auto_clock)
        .add_retry(max_retries=1, delay=0.5)
        .add_circuit_breaker(minimum_throughput=2, failure_ratio=1.0, state_provider=provider)
        .add_timeout(1.0)
        .build()
    )

    async def hangs() -> None:
        await auto_clock.sleep_async(10)
        await asyncio.sleep(0)

    with pytest.raises(TimeoutRejectedError):
        await pipeline.execute_async(hangs)
    assert provider.state is CircuitState.OPEN
    assert auto_clock.monotonic() == 20.5


@pytest.mark.parametrize("mode", ["sync", "async"])
async def test_breaker_outside_retry(auto_clock: FakeTimeProvider, mode: str) -> None:
    """Breaker outermost: a whole retried execution is one outcome for the breaker."""
    provider = CircuitBreakerStateProvider()
    pipeline = (
        ResiliencePipelineBuilder(time_provider=auto_clock)
        .add_timeout(100.0)
        .add_circuit_breaker(minimum_throughput=2, failure_ratio=0.5, state_provider=provider)
        .add_retry(max_retries=2, delay=1.0)
        .build()
    )
    calls: list[int] = []

    def always_fails() -> None:
        calls.append(1)
        raise ConnectionError

    for _ in range(2):
        with pytest.raises(ConnectionError):
            await run(pipeline, always_fails, mode)
    assert len(calls) == 6
    assert provider.state is CircuitState.OPEN
    with pytest.raises(BrokenCircuitError):
        await run(pipeline, always_fails, mode)
    assert len(calls) == 6


@pytest.mark.parametrize("mode", ["sync", "async"])
async def test_timeout_outside_retry_stops_the_retry_sleep(clock: FakeTimeProvider, mode: str) -> None:
    """An outer timeout firing during the retry delay ends it at once with the timeout's error."""
    pipeline = ResiliencePipelineBuilder(time_provider=clock).add_timeout(5.0).add_retry(delay=60.0).build()
    calls: list[int] = []

    def fails() -> None:
        calls.append(1)
        raise ConnectionError

    if mode == "sync":
        import threading

        def advance() -> None:
            while clock.pending_timers < 2:  # the timeout's timer and the retry's sleep
                threading.Event().wait(0.001)
            clock.advance(5.0)

        helper = threading.Thread(target=advance)
        helper.start()
        with pytest.raises(TimeoutRejectedError) as caught:
            pipeline.execute(fails)
        helper.join(5)
        assert isinstance(caught.value.__cause__, ConnectionError)
    else:
        execution = asyncio.ensure_future(run(pipeline, fails, "async"))
        while clock.pending_timers < 2:
            await asyncio.sleep(0)
        clock.advance(5.0)
        with pytest.raises(TimeoutRejectedError):
            await execution
    assert calls == [1]
    assert clock.pending_timers == 0
