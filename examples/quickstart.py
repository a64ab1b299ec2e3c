"""Quick start: retry + circuit breaker + timeout around a flaky call, sync and asyncio.

Run it with `make demo`. It prints every attempt, retry, timeout and circuit change.
"""

from __future__ import annotations

import asyncio
import itertools
import time

from resilience import (
    BrokenCircuitError,
    Err,
    Ok,
    ResiliencePipelineBuilder,
    TimeoutRejectedError,
    get_context,
    use_context,
)
from resilience.telemetry import TelemetryEvent, TelemetryOptions


def show(event: TelemetryEvent) -> None:
    if event.name in {"PipelineExecuting", "PipelineExecuted"}:
        return
    detail = ""
    if event.outcome is not None and event.outcome.error is not None:
        detail = f" after {type(event.outcome.error).__name__}"
        if event.name == "ExecutionAttempt" and not getattr(event.arguments, "handled", True):
            detail += " (not handled: passed on, not retried)"
    print(f"    [{event.severity.value:<11}] {event.strategy_name}: {event.name}{detail}")


pipeline = (
    ResiliencePipelineBuilder(name="quickstart", telemetry=TelemetryOptions(listeners=[show]))
    .add_retry(max_retries=3, delay=0.02, backoff="exponential", handle=ConnectionError)
    .add_circuit_breaker(failure_ratio=0.5, minimum_throughput=4, break_duration=0.2, handle=ConnectionError)
    .add_timeout(0.1)
    .build()
)

calls = itertools.count(1)


@pipeline
def fetch_price(item: str) -> str:
    """Fails twice with a connection error, then answers."""
    call = next(calls)
    context = get_context()
    attempt = context.attempt if context else 0
    print(f"  call {call}: fetching {item} (attempt {attempt})")
    if call <= 2:
        raise ConnectionError("upstream reset the connection")
    return f"{item}: 42.00"


async def slow_quote(item: str) -> str:
    print(f"  quoting {item} slowly...")
    await asyncio.sleep(5)
    return "never"


def always_down() -> str:
    raise ConnectionError("still down")


def main() -> None:
    print("1. sync: two failures are retried, the third call answers")
    with use_context(operation_key="price:widget"):
        print("  ->", fetch_price("widget"))

    print("\n2. async: the timeout cancels a slow call; the retry gives up on TimeoutRejectedError")
    outcome = asyncio.run(pipeline.settle_async(slow_quote, "gadget"))
    match outcome:
        case Ok(value):
            print("  ->", value)
        case Err(error):
            print(f"  -> failed: {type(error).__name__}: {error}")
            assert isinstance(error, TimeoutRejectedError)

    print("\n3. a dependency that stays down opens the circuit; callers are rejected at once")
    outcome = pipeline.settle(always_down)
    print(f"  -> {type(outcome.error).__name__}: {outcome.error}")
    started = time.monotonic()
    rejected = pipeline.settle(always_down)
    assert isinstance(rejected.error, BrokenCircuitError)
    print(
        f"  -> rejected in {1000 * (time.monotonic() - started):.2f} ms: {rejected.error} "
        f"(retry after {rejected.error.retry_after:.2f}s)"
    )


if __name__ == "__main__":
    main()
