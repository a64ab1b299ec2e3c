"""What an empty pipeline adds over a plain call (issue: at most 1 µs), sync and async.

Run: `make bench` (or `.venv/bin/python benchmarks/overhead.py`). Prints Markdown tables of
medians over several interleaved rounds; the numbers go into docs/performance.md.
"""

from __future__ import annotations

import argparse
import platform
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from _harness import compare_async, compare_sync, report

from resilience import PipelineBuilder


def work(x: int) -> int:
    return x + 1


async def awork(x: int) -> int:
    return x + 1


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--number", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    pipeline = PipelineBuilder().build()

    sync = compare_sync(
        {
            "plain call `work(1)`": lambda: work(1),
            "`pipeline.execute(work, 1)`": lambda: pipeline.execute(work, 1),
        },
        number=args.number,
        rounds=args.rounds,
    )
    asynchronous = compare_async(
        {
            "plain `await awork(1)`": lambda: awork(1),
            "`await pipeline.execute_async(awork, 1)`": lambda: pipeline.execute_async(awork, 1),
        },
        number=args.number,
        rounds=args.rounds,
    )
    print(
        f"Python {platform.python_version()} on {platform.machine()}, {args.rounds} rounds of {args.number:,} calls\n"
    )
    print(report("Empty pipeline, sync", sync, baseline=sync[0].name))
    print(f"\noverhead: {(sync[1].median - sync[0].median) * 1e9:,.0f} ns per call\n")
    print(report("Empty pipeline, async", asynchronous, baseline=asynchronous[0].name))
    print(f"\noverhead: {(asynchronous[1].median - asynchronous[0].median) * 1e9:,.0f} ns per call")


if __name__ == "__main__":
    main()
