"""What switched-off chaos and a registry lookup cost on the success path (goal: at most 0.2 µs each).

Run: `make bench` (or `.venv/bin/python benchmarks/chaos_registry.py`). Side by side, interleaved
round by round, medians:

- a retry pipeline alone, the same with a chaos fault strategy switched off (`enabled=False`,
  left out at build), switched off by a run-time flag (`enabled_generator`), and switched on at
  the default rate (0.001, an outcome injection so the loop never raises); sync and async;
- `ResiliencePipelineRegistry.get` and `get_or_add` of an existing key against the same lookup
  in a plain `dict` (what a user would write instead).
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import time
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).parent))

import _harness
from _harness import Result, compare_async, compare_sync, report

from resilience import Ok, ResiliencePipeline, ResiliencePipelineBuilder


def work(x: int) -> int:
    return x + 1


async def awork(x: int) -> int:
    return x + 1


def retry() -> ResiliencePipelineBuilder:
    return ResiliencePipelineBuilder(name="bench").add_retry(max_retries=3, delay=0.1, handle=ConnectionError)


def pipelines() -> dict[str, ResiliencePipeline]:
    flag = {"on": False}
    return {
        "retry alone": retry().build(),
        "retry + chaos `enabled=False`": retry().add_chaos_fault(fault=ConnectionError, enabled=False).build(),
        "retry + chaos off by `enabled_generator`": retry()
        .add_chaos_fault(fault=ConnectionError, enabled_generator=lambda _arguments: flag["on"])
        .build(),
        "retry + chaos on, rate 0.001": retry().add_chaos_outcome(outcome=Ok(0)).build(),
    }


def chaos(number: int, rounds: int) -> None:
    built = pipelines()
    sync = compare_sync(
        {name: (lambda p=p: p.execute(work, 1)) for name, p in built.items()}, number=number, rounds=rounds
    )
    asynchronous = compare_async(
        {name: (lambda p=p: p.execute_async(awork, 1)) for name, p in built.items()}, number=number, rounds=rounds
    )
    for title, results in (("sync", sync), ("async", asynchronous)):
        print(report(f"Chaos on the success path, {title}", results, baseline="retry alone"))
        print()
        print(added(results))
        print()


def registry(number: int, rounds: int) -> None:
    try:
        from resilience import ResiliencePipelineRegistry
    except ImportError:  # the registry is not there yet
        return
    reg = ResiliencePipelineRegistry()

    def configure(builder: ResiliencePipelineBuilder, key: object) -> None:
        builder.add_retry(handle=ConnectionError)

    plain: dict[object, ResiliencePipeline] = {}
    for index in range(100):
        key = f"endpoint-{index}"
        plain[key] = reg.get_or_add(key, configure)
    key = "endpoint-42"
    get = reg.get
    get_or_add = reg.get_or_add
    results = compare_sync(
        {
            "`plain[key]` (a dict)": lambda: plain[key],
            "`registry.get(key)`": lambda: get(key),
            "`registry.get_or_add(key, configure)`": lambda: get_or_add(key, configure),
            "`key in registry`": lambda: key in reg,
        },
        number=number,
        rounds=rounds,
    )
    print(report("Registry lookup (100 keys)", results, baseline="`plain[key]` (a dict)"))
    print()
    print(added(results))
    print()
    for result in results[1:]:
        print(f"- {result.name}: best round {min(result.samples) * 1e9:,.0f} ns per call")


def added(results: list[Result]) -> str:
    """What each candidate adds to the first, per round (interleaved rounds: the noise cancels)."""
    base = results[0]
    lines = [
        f"| added to {base.name} | median of per-round differences | best round vs best round |",
        "|---|---:|---:|",
    ]
    for result in results[1:]:
        paired = statistics.median(a - b for a, b in zip(result.samples, base.samples, strict=True))
        best = min(result.samples) - min(base.samples)
        lines.append(f"| {result.name} | {paired * 1e9:+,.0f} ns | {best * 1e9:+,.0f} ns |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--number", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=21)
    parser.add_argument(
        "--clock",
        choices=["cpu", "wall"],
        default="cpu",
        help="cpu (default): this thread's CPU time, so other jobs on a shared machine do not count",
    )
    args = parser.parse_args()
    if args.clock == "cpu":
        # The harness times with perf_counter; on a machine shared with other jobs, waiting for
        # a core is most of the noise. Thread CPU time leaves it out (same code, same loops).
        _harness.time = SimpleNamespace(perf_counter=time.thread_time)  # type: ignore[assignment]
    print(
        f"Python {platform.python_version()} on {platform.machine()}, {args.rounds} rounds of {args.number:,} calls, "
        f"{args.clock} time\n"
    )
    chaos(args.number, args.rounds)
    registry(args.number, args.rounds)


if __name__ == "__main__":
    main()
