"""Hedging: its success-path cost, and the tail latency it cuts (issue #15).

Run: `make bench` (or `.venv/bin/python benchmarks/hedging.py`).

1. Success path (the first attempt answers before `delay`), asyncio, side by side and
   interleaved: `async with asyncio.timeout()` alone (the peer; target: hedging <= 3x it), our
   empty pipeline, our timeout strategy, our hedging strategy. Also the sync hedging success
   path against the empty pipeline, for information.
2. Tail latency (asyncio): every attempt independently takes 100 ms with probability 10%, else
   1 ms. The same seeded calls run without hedging and with `delay=5 ms` (one, then two hedged
   attempts); we report latency percentiles and the attempts per call (the extra load).
"""

from __future__ import annotations

import argparse
import asyncio
import platform
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from _harness import compare_async, compare_sync, report

from resilience import PipelineBuilder, ResiliencePipeline, ResiliencePipelineBuilder


def work(x: int) -> int:
    return x + 1


async def awork(x: int) -> int:
    return x + 1


def success_path(number: int, rounds: int) -> None:
    empty = PipelineBuilder().build()
    timeout = ResiliencePipelineBuilder().add_timeout(30.0).build()
    hedging = ResiliencePipelineBuilder().add_hedging(delay=2.0).build()

    async def asyncio_timeout() -> int:
        async with asyncio.timeout(30.0):
            return await awork(1)

    results = compare_async(
        {
            "`async with asyncio.timeout(30)` alone": asyncio_timeout,
            "resilience empty pipeline": lambda: empty.execute_async(awork, 1),
            "resilience timeout alone": lambda: timeout.execute_async(awork, 1),
            "resilience hedging (first attempt wins)": lambda: hedging.execute_async(awork, 1),
        },
        number=number,
        rounds=rounds,
    )
    print(report("Hedging success path, async", results, baseline=results[0].name))
    ratios = [h / t for h, t in zip(results[3].samples, results[0].samples, strict=True)]
    print(f"\nhedging / asyncio.timeout, median of per-round ratios: {statistics.median(ratios):.2f}x (target <= 3x)\n")

    sync = compare_sync(
        {
            "plain call": lambda: work(1),
            "resilience empty pipeline": lambda: empty.execute(work, 1),
            "resilience hedging (first attempt wins)": lambda: hedging.execute(work, 1),
        },
        number=number,
        rounds=rounds,
    )
    print(report("Hedging success path, sync (for information)", sync, baseline=sync[0].name))
    print()


class Service:
    """A replica whose every call is slow (100 ms) with probability 10%, else fast (1 ms)."""

    def __init__(self, seed: int, slow: float, fast: float) -> None:
        self.random = random.Random(seed)
        self.slow = slow
        self.fast = fast
        self.calls = 0

    async def __call__(self, _n: int) -> int:
        self.calls += 1
        await asyncio.sleep(self.slow if self.random.random() < 0.1 else self.fast)
        return _n


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


async def latencies(pipeline: ResiliencePipeline, service: Service, calls: int, concurrency: int) -> list[float]:
    measured: list[float] = []
    gate = asyncio.Semaphore(concurrency)

    async def one(n: int) -> None:
        async with gate:
            started = time.perf_counter()
            await pipeline.execute_async(service, n)
            measured.append(time.perf_counter() - started)

    await asyncio.gather(*(one(n) for n in range(calls)))
    return measured


def tail_latency(calls: int, concurrency: int) -> None:
    cases = {
        "no hedging": PipelineBuilder().build(),
        "hedging, delay=5 ms, 1 hedged attempt": ResiliencePipelineBuilder().add_hedging(delay=0.005).build(),
        "hedging, delay=5 ms, 2 hedged attempts": ResiliencePipelineBuilder()
        .add_hedging(delay=0.005, max_hedged_attempts=2)
        .build(),
    }
    print(f"### Tail latency, asyncio: {calls:,} calls, {concurrency} at a time, 10% of attempts take 100 ms\n")
    print("| case | p50 | p90 | p99 | p99.9 | max | attempts per call |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, pipeline in cases.items():
        service = Service(seed=15, slow=0.1, fast=0.001)
        measured = asyncio.run(latencies(pipeline, service, calls, concurrency))
        cells = " | ".join(f"{percentile(measured, q) * 1000:.1f} ms" for q in (0.5, 0.9, 0.99, 0.999, 1.0))
        print(f"| {name} | {cells} | {service.calls / calls:.2f} |")
    print()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--number", type=int, default=50_000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--calls", type=int, default=2_000)
    parser.add_argument("--concurrency", type=int, default=20)
    parser.add_argument("--tail-only", action="store_true")
    args = parser.parse_args()
    print(
        f"Python {platform.python_version()} on {platform.machine()}, {args.rounds} rounds of {args.number:,} calls\n"
    )
    if not args.tail_only:
        success_path(args.number, args.rounds)
    tail_latency(args.calls, args.concurrency)


if __name__ == "__main__":
    main()
