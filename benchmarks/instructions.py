"""CPU instructions per execution of the success and failure paths, counted by valgrind: an A/B that load cannot blur.

Wall-clock runs on a shared 2-vCPU VM move by 20-50% between consecutive processes, which
hides a 5% change. Instruction counts do not depend on the machine's load: each case runs
`--number` executions in a fresh process under `valgrind --tool=callgrind`, minus the same
process with no execution (imports and build), divided by `--number`.

Run: `.venv/bin/python benchmarks/instructions.py` (this checkout), or with
`--against DIR` to compare with another checkout of the project (for example a
`git worktree add /tmp/before <rev>`): each case is counted in both, side by side.
`--otel-api` imports the OpenTelemetry API (no SDK, no provider) in the measured process first,
as any library that instruments itself does (tenacity and pybreaker's environments here): the
"is anyone listening" check then has the API's globals to read.
The cases `pybreaker sync`, `circuitbreaker sync` and `asyncio.timeout async` count the peers of
`lean.py`'s breaker and async timeout rows (the same loop through pybreaker's `call`,
circuitbreaker's `@circuit`, and `async with asyncio.timeout(30)` around an awaited coroutine;
no checkout of ours is imported), so that ours/peer can be stated in instructions.
The cases `retrying` (three handled failures, then a success, no delay), `failing` (a handled
failure through a closed circuit) and `rejected` (a rate limiter's rejection) count the failure
paths: a change that is free on success can cost there.
Needs `valgrind` on the PATH; `make bench` does not run it.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from resilience import ResiliencePipeline

ROOT = Path(__file__).resolve().parent.parent
CASES = (
    "empty sync",
    "empty async",
    "retry sync",
    "breaker sync",
    "timeout sync",
    "timeout async",
    "stack sync",
    "stack async",
    "lock sync",
    "lock async",
    "limiter sync",
    "limiter async",
    "consecutive sync",
    "hedging sync",
    "hedging async",
    "retrying sync",
    "retrying async",
    "failing sync",
    "rejected sync",
    "rejected async",
    "pybreaker sync",
    "circuitbreaker sync",
    "asyncio.timeout async",
)
# Peers of the breaker and async timeout rows (`lean.py`'s): what a user would pick instead, counted the
# same way, so that a ratio of instructions stands beside `lean.py`'s ratio of time.
PEERS = {"pybreaker", "circuitbreaker", "asyncio.timeout"}
# Cases whose executions fail or are rejected: paths a success-path count never crosses, where a
# "free" simplification once cost 4-7% unseen.
FAILURE_PATHS = {"failing", "rejected"}
_COLLECTED = re.compile(r"Collected : (\d+)")
_OTEL_API = "RESILIENCE_BENCH_OTEL_API"


def run_case(strategy: str, mode: str, number: int) -> None:
    """The measured process: build the pipeline, then `number` executions of a trivial callable."""
    if os.environ.get(_OTEL_API):
        import opentelemetry.metrics
        import opentelemetry.trace  # noqa: F401 - imported is what counts
    if strategy in PEERS:
        run_peer(strategy, number)
        return
    pipeline = build(strategy)
    work, awork = callables(strategy)
    # `settle` answers a failure as an `Err`: the loop measures the failure path, not a raise.
    failing = strategy in FAILURE_PATHS
    if mode == "sync":
        call: Callable[[Callable[[], int]], object] = pipeline.settle if failing else pipeline.execute
        for _ in range(number):
            call(work)
        return

    async def loop() -> None:
        call: Callable[[Callable[[], Awaitable[int]]], Awaitable[object]]
        call = pipeline.settle_async if failing else pipeline.execute_async
        for _ in range(number):
            await call(awork)

    asyncio.run(loop())


def build(strategy: str) -> ResiliencePipeline:
    from resilience import ResiliencePipelineBuilder
    from resilience.stores import MemoryLockStore

    builder = ResiliencePipelineBuilder()
    if strategy in {"retry", "stack"}:
        builder = builder.add_retry(max_retries=3, delay=0.1, handle=ConnectionError)
    if strategy in {"breaker", "stack"}:
        builder = builder.add_circuit_breaker(failure_ratio=0.5, minimum_throughput=10)
    if strategy in {"timeout", "stack"}:
        builder = builder.add_timeout(30.0)
    if strategy == "lock":
        builder = builder.add_lock("bench", store=MemoryLockStore())
    if strategy == "consecutive":
        builder = builder.add_circuit_breaker(consecutive_failures=5)
    if strategy == "limiter":
        builder = builder.add_concurrency_limiter(8)
    if strategy == "hedging":
        # No hedge is launched (`delay=inf`): a finite delay arms a timer whose thread's wake-ups
        # make the count differ run to run; this measures the primary attempt's own path.
        builder = builder.add_hedging(max_hedged_attempts=1, delay=float("inf"))
    if strategy == "retrying":
        builder = builder.add_retry(max_retries=3, delay=0.0, handle=ConnectionError)
    if strategy == "failing":
        # Never opens: every execution is a handled failure counted by a closed circuit.
        builder = builder.add_circuit_breaker(failure_ratio=1.0, minimum_throughput=10**9)
    if strategy == "rejected":
        # The first execution takes the only permit of the hour; every one after is rejected.
        builder = builder.add_rate_limiter(1, per=3600.0)
    return builder.build()


def callables(strategy: str) -> tuple[Callable[[], int], Callable[[], Awaitable[int]]]:
    """The measured callable: returns 1, or fails three calls in four (`retrying`) or always (`failing`)."""
    calls = 0

    def work() -> int:
        return 1

    def flaky() -> int:
        nonlocal calls
        calls += 1
        if strategy == "failing" or calls % 4:
            raise ConnectionError
        return 1

    chosen = flaky if strategy in {"retrying", "failing"} else work

    async def awork() -> int:
        return chosen()

    async def aone() -> int:
        return 1

    return chosen, aone if chosen is work else awork


def run_peer(peer: str, number: int) -> None:
    """`number` calls of a trivial callable through `peer` (pybreaker's `call`, circuitbreaker's `@circuit`, a timeout)."""

    def work() -> int:
        return 1

    async def awork() -> int:
        return 1

    async def timed() -> int:  # `lean.py`'s peer of `add_timeout(30)`
        async with asyncio.timeout(30):
            return await awork()

    async def loop() -> None:
        for _ in range(number):
            await timed()

    if peer == "asyncio.timeout":
        asyncio.run(loop())
        return
    if peer == "pybreaker":
        import pybreaker

        call = pybreaker.CircuitBreaker().call
        for _ in range(number):
            call(work)
        return
    import circuitbreaker

    decorated = circuitbreaker.circuit(failure_threshold=5)(work)
    for _ in range(number):
        decorated()


def count(checkout: Path, case: str, number: int, *, otel_api: bool = False) -> int:
    """Instructions of one process of `case` with `number` executions, run from `checkout`."""
    strategy, mode = case.split()
    env = {**os.environ, "PYTHONPATH": str(checkout), _OTEL_API: "1" if otel_api else ""}
    command = [
        "valgrind",
        "--tool=callgrind",
        "--callgrind-out-file=/dev/null",
        sys.executable,
        __file__,
        "--run",
        strategy,
        mode,
        str(number),
    ]
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=True, cwd=checkout)
    found = _COLLECTED.search(done.stderr)
    if found is None:
        msg = f"no instruction count in valgrind's output for {case!r}:\n{done.stderr[-2000:]}"
        raise RuntimeError(msg)
    return int(found.group(1))


def per_execution(checkout: Path, case: str, number: int, *, otel_api: bool = False) -> int:
    return (count(checkout, case, number, otel_api=otel_api) - count(checkout, case, 0, otel_api=otel_api)) // number


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--number", type=int, default=3000)
    parser.add_argument("--against", type=Path, help="another checkout, counted side by side")
    parser.add_argument("--case", action="append", choices=CASES, help="only these cases")
    parser.add_argument("--otel-api", action="store_true", help="import the OpenTelemetry API (no SDK) first")
    parser.add_argument("--run", nargs=3, metavar=("STRATEGY", "MODE", "N"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.run:
        strategy, mode, number = args.run
        run_case(strategy, mode, int(number))
        return
    if shutil.which("valgrind") is None:
        sys.exit("valgrind is not installed (apt-get install valgrind)")
    cases = args.case or list(CASES)
    if args.against is None:
        print("| instructions per execution | this checkout |\n|---|---:|")
        for case in cases:
            print(f"| {case} | {per_execution(ROOT, case, args.number, otel_api=args.otel_api):,} |", flush=True)
        return
    print(f"| instructions per execution | {args.against} | this checkout | change |\n|---|---:|---:|---:|")
    for case in cases:
        before = per_execution(args.against.resolve(), case, args.number, otel_api=args.otel_api)
        after = per_execution(ROOT, case, args.number, otel_api=args.otel_api)
        print(f"| {case} | {before:,} | {after:,} | {(after - before) / before:+.1%} |", flush=True)


if __name__ == "__main__":
    main()
