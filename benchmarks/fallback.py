"""What a fallback strategy adds on the success path (issue #15: at most 0.3 µs), sync and async.

Run: `make bench` (or `.venv/bin/python benchmarks/fallback.py`). Side by side, interleaved
round by round: the empty pipeline, a pipeline of one pass-through strategy (the floor any
strategy pays: the chain, the context), and a pipeline of one fallback strategy. The fallback's
own cost is "fallback - pass-through"; "fallback - empty" adds the pipeline's one-strategy floor.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from _harness import Result, compare_async, compare_sync, report

from resilience import PipelineBuilder, ResilienceContext, ResiliencePipelineBuilder


class PassThrough:
    """A strategy that only calls the inner part."""

    def execute(self, callback: Any, context: ResilienceContext) -> Any:
        return callback(context)

    async def execute_async(self, callback: Any, context: ResilienceContext) -> Any:
        return await callback(context)


def work(x: int) -> int:
    return x + 1


async def awork(x: int) -> int:
    return x + 1


def _added(results: list[Result], name: str, baseline: str) -> float:
    """Median over rounds of the per-round difference (a noisy round slows both sides alike)."""
    by_name = {r.name: r for r in results}
    pairs = zip(by_name[name].samples, by_name[baseline].samples, strict=True)
    return statistics.median(a - b for a, b in pairs) * 1e9


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--number", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    empty = PipelineBuilder().build()
    passing = PipelineBuilder().add(PassThrough()).build()
    fallback = ResiliencePipelineBuilder().add_fallback(lambda _args: 0, handle=ConnectionError).build()

    sync = compare_sync(
        {
            "empty pipeline": lambda: empty.execute(work, 1),
            "one pass-through strategy": lambda: passing.execute(work, 1),
            "fallback": lambda: fallback.execute(work, 1),
        },
        number=args.number,
        rounds=args.rounds,
    )
    asynchronous = compare_async(
        {
            "empty pipeline": lambda: empty.execute_async(awork, 1),
            "one pass-through strategy": lambda: passing.execute_async(awork, 1),
            "fallback": lambda: fallback.execute_async(awork, 1),
        },
        number=args.number,
        rounds=args.rounds,
    )
    print(
        f"Python {platform.python_version()} on {platform.machine()}, {args.rounds} rounds of {args.number:,} calls\n"
    )
    for title, results in (("sync", sync), ("async", asynchronous)):
        print(report(f"Fallback success path, {title}", results, baseline="empty pipeline"))
        own = _added(results, "fallback", "one pass-through strategy")
        total = _added(results, "fallback", "empty pipeline")
        print(f"\nfallback's own cost (vs pass-through, median of per-round differences): {own:,.0f} ns")
        print(f"fallback vs empty pipeline (the same): +{total:,.0f} ns (target <= 300 ns)\n")


if __name__ == "__main__":
    main()
