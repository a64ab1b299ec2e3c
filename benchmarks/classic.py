"""Success-path overhead of retry + circuit breaker + timeout, side by side with the peers.

Not a test: run `python benchmarks/classic.py` (after `make install` and `pip install --group bench`, or `make bench`). Each
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

from resilience import PipelineBuilder, ResilienceContext, ResiliencePipeline, ResiliencePipelineBuilder


class PassThrough:
    """A strategy that only calls the inner part: the pipeline's own floor per strategy."""

    def execute(self, callback: Any, context: ResilienceContext) -> Any:
        return callback(context)

    async def execute_async(self, callback: Any, context: ResilienceContext) -> Any:
        return await callback(context)


def floor() -> ResiliencePipeline:
    return PipelineBuilder().add(PassThrough()).add(PassThrough()).add(PassThrough()).build()


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


def time_sync(call: Any, loops: int) -> float:
    start = time.perf_counter()
    for i in range(loops):
        call(i)
    return (time.perf_counter() - start) / loops


def time_async(make: Any, loops: int) -> float:
    async def one_run() -> float:
        call = make()
        start = time.perf_counter()
        for i in range(loops):
            await call(i)
        return (time.perf_counter() - start) / loops

    return asyncio.run(one_run())


def sync_cases() -> dict[str, Any]:
    ours = pipeline()
    breaker = pybreaker.CircuitBreaker(fail_max=5, reset_timeout=30)
    retried = tenacity.retry(
        stop=tenacity.stop_after_attempt(4),
        wait=tenacity.wait_fixed(0.1),
        retry=tenacity.retry_if_exception_type(ConnectionError),
    )(work)
    empty = PipelineBuilder().build()
    passing = floor()
    retry = ResiliencePipelineBuilder().add_retry(max_retries=3, delay=0.1, handle=ConnectionError).build()
    breaker_only = ResiliencePipelineBuilder().add_circuit_breaker(failure_ratio=0.5, minimum_throughput=10).build()
    timeout = ResiliencePipelineBuilder().add_timeout(30.0).build()
    return {
        "plain call": work,
        "resilience empty pipeline": lambda i: empty.execute(work, i),
        "resilience 3 pass-through strategies": lambda i: passing.execute(work, i),
        "resilience retry alone": lambda i: retry.execute(work, i),
        "resilience circuit breaker alone": lambda i: breaker_only.execute(work, i),
        "resilience timeout alone": lambda i: timeout.execute(work, i),
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

    def passing() -> Any:
        built = floor()
        return lambda i: built.execute_async(awork, i)

    def timeout_alone() -> Any:
        built = ResiliencePipelineBuilder().add_timeout(30.0).build()
        return lambda i: built.execute_async(awork, i)

    return {
        "plain await": plain,
        "resilience 3 pass-through strategies": passing,
        "resilience timeout alone": timeout_alone,
        "resilience retry+breaker+timeout": ours,
        "asyncio.timeout alone": asyncio_timeout,
        "hyx retry+breaker+timeout": hyx_stack,
    }


def run_all(loops: int, runs: int) -> dict[str, list[float]]:
    """Per case, one sample per run. Cases are interleaved within each run, so that a noisy
    neighbour slows every case of that run alike (ratios are taken per run, then the median)."""
    sync = sync_cases()
    async_ = async_cases()
    samples: dict[str, list[float]] = {f"sync {name}": [] for name in sync}
    samples.update({f"async {name}": [] for name in async_})
    for call in sync.values():  # warm-up
        time_sync(call, loops // 10)
    for _ in range(runs):
        for name, call in sync.items():
            samples[f"sync {name}"].append(time_sync(call, loops))
        for name, make in async_.items():
            samples[f"async {name}"].append(time_async(make, loops))
    return samples


def ratio(samples: dict[str, list[float]], ours: str, peer: str) -> float:
    return statistics.median(a / b for a, b in zip(samples[ours], samples[peer], strict=True))


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

    plain = run_all(args.loops, args.runs)
    install_meter_provider()
    otel = run_all(args.loops, args.runs)

    print(f"median of {args.runs} interleaved runs x {args.loops} calls, microseconds per call")
    print(f"{'case':46} {'no SDK':>9} {'OTel SDK':>9}")
    # The OTel column installs an SDK MeterProvider as the global provider first.
    for name in plain:
        print(f"{name:46} {statistics.median(plain[name]) * 1e6:9.2f} {statistics.median(otel[name]) * 1e6:9.2f}")
    ours = "resilience retry+breaker+timeout"
    print("-- ratios, median of per-run ratios (ours / peer; < 1: ours is faster)     no SDK  OTel SDK")
    for label, mode, peer in (
        ("sync  vs pybreaker alone (target <= 1.0)", "sync", "pybreaker CircuitBreaker.call"),
        ("sync  vs tenacity alone  (target <= 0.1)", "sync", "tenacity @retry"),
        ("async vs asyncio.timeout (target <= 1.2)", "async", "asyncio.timeout alone"),
        ("async vs hyx stack       (target <= 0.33)", "async", "hyx retry+breaker+timeout"),
    ):
        a = ratio(plain, f"{mode} {ours}", f"{mode} {peer}")
        b = ratio(otel, f"{mode} {ours}", f"{mode} {peer}")
        print(f"{label:74} {a:6.2f} {b:9.2f}")


if __name__ == "__main__":
    main()
