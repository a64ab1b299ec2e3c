"""Success-path overhead of retry + circuit breaker + timeout, side by side with the peers.

Not a test: run `python benchmarks/classic.py` (after `pip install -e '.[dev,bench]'`). Each
case calls a trivial function many times; each number is the median over several runs of the
mean time per call. The ratios compare our stack with what a user would pick instead:

- sync:  our retry+breaker+timeout pipeline vs `pybreaker.CircuitBreaker.call` alone and
  tenacity's `@retry` alone;
- async: our pipeline vs `async with asyncio.timeout(...)` alone and a hyx
  retry+breaker+timeout stack;

then the same with an OpenTelemetry SDK `MeterProvider` installed as the global provider.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from typing import Any

import hyx.circuitbreaker
import hyx.retry
import hyx.timeout
import pybreaker
import tenacity

from resilience import ResiliencePipeline, ResiliencePipelineBuilder


def work(x: int) -> int:
    return x + 1


async def awork(x: int) -> int:
    return x + 1


def pipeline() -> ResiliencePipeline:
    return (
        ResiliencePipelineBuilder(name="bench")
        .add_retry(max_retries=3, delay=0.1, handle=ConnectionError)
        .add_circuit_breaker(failure_ratio=0.5, minimum_throughput=10)
        .add_timeout(30.0)
        .build()
    )


def measure_sync(call: Any, loops: int, runs: int) -> float:
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        for i in range(loops):
            call(i)
        samples.append((time.perf_counter() - start) / loops)
    return statistics.median(samples)


def measure_async(make: Any, loops: int, runs: int) -> float:
    async def one_run() -> float:
        call = make()
        start = time.perf_counter()
        for i in range(loops):
            await call(i)
        return (time.perf_counter() - start) / loops

    async def main() -> float:
        samples = [await one_run() for _ in range(runs)]
        return statistics.median(samples)

    return asyncio.run(main())


def sync_cases() -> dict[str, Any]:
    ours = pipeline()
    breaker = pybreaker.CircuitBreaker(fail_max=5, reset_timeout=30)
    retried = tenacity.retry(
        stop=tenacity.stop_after_attempt(4),
        wait=tenacity.wait_fixed(0.1),
        retry=tenacity.retry_if_exception_type(ConnectionError),
    )(work)
    return {
        "plain call": work,
        "resilience retry+breaker+timeout": lambda i: ours.execute(work, i),
        "pybreaker CircuitBreaker.call": lambda i: breaker.call(work, i),
        "tenacity @retry": retried,
    }


def async_cases() -> dict[str, Any]:
    def ours() -> Any:
        built = pipeline()
        return lambda i: built.execute_async(awork, i)

    def asyncio_timeout() -> Any:
        async def call(i: int) -> int:
            async with asyncio.timeout(30.0):
                return await awork(i)

        return call

    def hyx_stack() -> Any:
        @hyx.retry.retry(on=ConnectionError, attempts=3, backoff=0.1)
        @hyx.circuitbreaker.consecutive_breaker(exceptions=ConnectionError)
        @hyx.timeout.timeout(30.0)
        async def call(i: int) -> int:
            return await awork(i)

        return call

    def plain() -> Any:
        return awork

    return {
        "plain await": plain,
        "resilience retry+breaker+timeout": ours,
        "asyncio.timeout alone": asyncio_timeout,
        "hyx retry+breaker+timeout": hyx_stack,
    }


def run_all(loops: int, runs: int) -> tuple[dict[str, float], dict[str, float]]:
    sync = {name: measure_sync(call, loops, runs) for name, call in sync_cases().items()}
    async_ = {name: measure_async(make, loops, runs) for name, make in async_cases().items()}
    return sync, async_


def install_meter_provider() -> None:
    from opentelemetry import metrics
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    metrics.set_meter_provider(MeterProvider(metric_readers=[InMemoryMetricReader()]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--loops", type=int, default=20_000)
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()

    plain_sync, plain_async = run_all(args.loops, args.runs)
    install_meter_provider()
    otel_sync, otel_async = run_all(args.loops, args.runs)

    print(f"median of {args.runs} runs x {args.loops} calls, microseconds per call")
    print(f"{'case':40} {'no SDK':>9} {'OTel SDK':>9}")
    for title, plain, otel in (("sync", plain_sync, otel_sync), ("async", plain_async, otel_async)):
        print(f"-- {title}")
        for name in plain:
            print(f"{name:40} {plain[name] * 1e6:9.2f} {otel[name] * 1e6:9.2f}")
    ours = "resilience retry+breaker+timeout"
    print("-- ratios (ours / peer; < 1 means ours is faster)         no SDK  OTel SDK")
    for label, table_a, table_b, peer in (
        ("sync  vs pybreaker alone (target <= 1.0)", plain_sync, otel_sync, "pybreaker CircuitBreaker.call"),
        ("sync  vs tenacity alone  (target <= 0.1)", plain_sync, otel_sync, "tenacity @retry"),
        ("async vs asyncio.timeout (target <= 1.2)", plain_async, otel_async, "asyncio.timeout alone"),
        ("async vs hyx stack       (target <= 0.33)", plain_async, otel_async, "hyx retry+breaker+timeout"),
    ):
        print(f"{label:56} {table_a[ours] / table_a[peer]:6.2f} {table_b[ours] / table_b[peer]:9.2f}")


if __name__ == "__main__":
    main()
