"""The lean path: each strategy alone against the single-purpose library a user would pick instead.

Not a test: run `python benchmarks/lean.py` (after `make bench`, which installs the peers). Each
row times a trivial call through one of our strategies and through its peer, interleaved round
by round (so machine noise hits both alike), and prints the medians, the ratio and the goal;
the load average is printed first, since a busy machine moves every number. `--svg` also
writes `docs/img/lean-path.svg` (our time and the peer's per row).

    .venv/bin/python benchmarks/lean.py --number 20000 --rounds 15
"""

from __future__ import annotations

import argparse
import asyncio
import html
import os
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parent.parent))  # this checkout, not whichever one is installed

from _harness import compare_async, compare_sync

from resilience import ResiliencePipelineBuilder
from resilience.stores import MemoryLockStore

OUT = Path(__file__).parent.parent / "docs" / "img" / "lean-path.svg"


def work() -> int:
    return 1


async def awork() -> int:
    return 1


@dataclass
class Row:
    case: str
    ours: float
    peer_name: str
    peer: float
    goal: float  # the ratio to stay at or below

    @property
    def ratio(self) -> float:
        return self.ours / self.peer


def _pair(  # noqa: PLR0917 - one row's whole description
    case: str, ours: Callable[[], object], peers: dict[str, Callable[[], object]], goal: float, n: int, rounds: int
) -> list[Row]:
    results = {r.name: r.median for r in compare_sync({"ours": ours, **peers}, number=n, rounds=rounds)}
    return [Row(case, results["ours"], name, results[name], goal) for name in peers]


def _pair_async(  # noqa: PLR0917 - one row's whole description
    case: str,
    ours: Callable[[], Awaitable[object]],
    peers: dict[str, Callable[[], Awaitable[object]]],
    goal: float,
    n: int,
    rounds: int,
) -> list[Row]:
    results = {r.name: r.median for r in compare_async({"ours": ours, **peers}, number=n, rounds=rounds)}
    return [Row(case, results["ours"], name, results[name], goal) for name in peers]


def retry_rows(n: int, rounds: int) -> list[Row]:
    import backoff
    import stamina
    import tenacity

    ours = ResiliencePipelineBuilder().add_retry(handle=ConnectionError).build()
    peers: dict[str, Callable[[], object]] = {
        "backoff @on_exception": backoff.on_exception(backoff.expo, ConnectionError)(work),
        "tenacity @retry": tenacity.retry(retry=tenacity.retry_if_exception_type(ConnectionError))(work),
        "stamina @retry": stamina.retry(on=ConnectionError)(work),
    }
    rows = _pair("add_retry(), healthy call", lambda: ours.execute(work), peers, 1.0, n, rounds)
    apeers: dict[str, Callable[[], Awaitable[object]]] = {
        "backoff @on_exception": backoff.on_exception(backoff.expo, ConnectionError)(awork),
        "tenacity @retry": tenacity.retry(retry=tenacity.retry_if_exception_type(ConnectionError))(awork),
    }
    rows += _pair_async(
        "async add_retry(), healthy call", lambda: ours.execute_async(awork), apeers, 1.0, n=n, rounds=rounds
    )
    return rows


def failing_retry_rows(n: int, rounds: int) -> list[Row]:
    import backoff
    import tenacity

    def flaky() -> Callable[[], int]:
        state = [0]

        def call() -> int:
            state[0] += 1
            if state[0] % 4:
                raise ConnectionError
            return 1

        return call

    ours_fn, tenacity_fn, backoff_fn = flaky(), flaky(), flaky()
    ours = ResiliencePipelineBuilder().add_retry(max_retries=3, delay=0, handle=ConnectionError).build()
    peers: dict[str, Callable[[], object]] = {
        "tenacity @retry": tenacity.retry(
            retry=tenacity.retry_if_exception_type(ConnectionError), stop=tenacity.stop_after_attempt(4)
        )(tenacity_fn),
        "backoff @on_exception": backoff.on_exception(backoff.constant, ConnectionError, max_tries=4, interval=0)(
            backoff_fn
        ),
    }
    return _pair(
        "retry: 3 failures then success, no delay", lambda: ours.execute(ours_fn), peers, 1.0, n=n // 10, rounds=rounds
    )


def breaker_rows(n: int, rounds: int) -> list[Row]:
    import pybreaker

    ours = ResiliencePipelineBuilder().add_circuit_breaker().build()
    breaker = pybreaker.CircuitBreaker()
    rows = _pair(
        "add_circuit_breaker(), closed",
        lambda: ours.execute(work),
        {"pybreaker call": lambda: breaker.call(work)},
        1.0,
        n,
        rounds,
    )
    consecutive = ResiliencePipelineBuilder().add_circuit_breaker(consecutive_failures=5).build()
    import circuitbreaker

    decorated = circuitbreaker.circuit(failure_threshold=5)(work)
    rows += _pair(
        "add_circuit_breaker(consecutive_failures=5)",
        lambda: consecutive.execute(work),
        {"circuitbreaker @circuit": decorated},
        1.5,
        n,
        rounds,
    )
    return rows


def timeout_rows(n: int, rounds: int) -> list[Row]:
    ours = ResiliencePipelineBuilder().add_timeout(30).build()

    async def plain() -> int:
        async with asyncio.timeout(30):
            return await awork()

    return _pair_async(
        "async add_timeout(30)", lambda: ours.execute_async(awork), {"asyncio.timeout(30)": plain}, 1.3, n, rounds
    )


def limiter_rows(n: int, rounds: int) -> list[Row]:
    import limits
    import limits.storage
    import limits.strategies
    import pyrate_limiter

    ours = ResiliencePipelineBuilder().add_concurrency_limiter(8).build()
    semaphore = threading.BoundedSemaphore(8)

    def bounded() -> int:
        with semaphore:
            return work()

    rows = _pair(
        "add_concurrency_limiter(8)",
        lambda: ours.execute(work),
        {"threading.BoundedSemaphore(8)": bounded},
        1.5,
        n,
        rounds,
    )
    # At most one permit per microsecond is what a rate limiter accepts: never exhausted here.
    rate = ResiliencePipelineBuilder().add_rate_limiter(10**6, per=1).build()
    limiter = limits.strategies.MovingWindowRateLimiter(limits.storage.MemoryStorage())
    item = limits.RateLimitItemPerSecond(10**6)
    pyrate = pyrate_limiter.Limiter(pyrate_limiter.Rate(10**6, pyrate_limiter.Duration.SECOND))

    def with_limits() -> int:
        limiter.hit(item, "k")
        return work()

    def with_pyrate() -> int:
        pyrate.try_acquire("k")
        return work()

    rows += _pair(
        "add_rate_limiter(...) in process",
        lambda: rate.execute(work),
        {"limits (moving window)": with_limits, "pyrate-limiter": with_pyrate},
        1.0,
        n,
        rounds,
    )
    return rows


def fixed_cost_rows(n: int, rounds: int) -> list[Row]:
    """The empty pipeline against a plain call, and the memory lock against the same pipeline without it."""
    empty = ResiliencePipelineBuilder().build()
    rows = _pair(
        "empty pipeline, sync (goal: +0.5 µs)", lambda: empty.execute(work), {"plain call": work}, 0.0, n, rounds
    )
    rows += _pair_async(
        "empty pipeline, async (goal: +0.8 µs)",
        lambda: empty.execute_async(awork),
        {"plain await": awork},
        0.0,
        n,
        rounds,
    )
    locked = ResiliencePipelineBuilder().add_lock("bench", store=MemoryLockStore()).build()
    rows += _pair(
        "add_lock, memory store",
        lambda: locked.execute(work),
        {"empty pipeline": lambda: empty.execute(work)},
        8.0,
        n // 4,
        rounds,
    )
    return rows


SUITES: dict[str, Callable[[int, int], list[Row]]] = {
    "retry": retry_rows,
    "failing-retry": failing_retry_rows,
    "breaker": breaker_rows,
    "timeout": timeout_rows,
    "limiters": limiter_rows,
    "fixed": fixed_cost_rows,
}


def table(rows: list[Row]) -> str:
    lines = ["| case | ours | peer | peer's time | ratio | goal |", "|---|---:|---|---:|---:|---:|"]
    for row in rows:
        if row.goal:
            goal = f"≤ {row.goal:.1f}x"
            met = "✅" if row.ratio <= row.goal else "❌"
        else:  # an absolute goal, in the case's name: the difference is what counts
            goal = f"+{(row.ours - row.peer) * 1e6:.2f} µs"
            met = ""
        lines.append(
            f"| {row.case} | {row.ours * 1e6:.2f} µs | {row.peer_name} | {row.peer * 1e6:.2f} µs "
            f"| {row.ratio:.2f}x | {goal} {met} |"
        )
    return "\n".join(lines)


def svg(rows: list[Row]) -> str:
    width, label_width, bar, gap, top = 900, 420, 14, 10, 40
    height = top + len(rows) * (2 * bar + gap) + 20
    longest = max(max(r.ours, r.peer) for r in rows)
    scale = (width - label_width - 90) / longest
    parts = [
        (
            f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
            f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="12">'
        ),
        f'<rect width="{width}" height="{height}" fill="white"/>',
        '<text x="10" y="24" font-size="15" font-weight="bold">The lean path: ours (blue) and the peer (grey), µs per call</text>',
    ]
    for index, row in enumerate(rows):
        y = top + index * (2 * bar + gap)
        label = f"{row.case} / {row.peer_name}"
        parts.append(f'<text x="{label_width - 8}" y="{y + bar + 4}" text-anchor="end">{html.escape(label)}</text>')
        for offset, value, colour in ((0, row.ours, "#3f51b5"), (bar, row.peer, "#9e9e9e")):
            length = max(value * scale, 1.0)
            parts.append(
                f'<rect x="{label_width}" y="{y + offset}" width="{length:.1f}" height="{bar - 1}" fill="{colour}"/>'
                f'<text x="{label_width + length + 6:.1f}" y="{y + offset + bar - 3}">{value * 1e6:.2f}</text>'
            )
    parts.append("</svg>")
    return "\n".join(parts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--number", type=int, default=20_000, help="calls per round and candidate")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--only", action="append", choices=SUITES, help="only these suites")
    parser.add_argument("--svg", action="store_true", help=f"also write {OUT.relative_to(OUT.parents[2])}")
    args = parser.parse_args()
    print(f"load average before: {os.getloadavg()[0]:.2f} (2-core machine)", flush=True)
    started = time.monotonic()
    rows: list[Row] = []
    for name in args.only or SUITES:
        rows += SUITES[name](args.number, args.rounds)
    print(table(rows))
    print(f"\nload average after: {os.getloadavg()[0]:.2f}; {time.monotonic() - started:.0f} s")
    if args.svg:
        OUT.write_text(svg(rows), encoding="utf-8")
        print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
