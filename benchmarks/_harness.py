"""A tiny side-by-side benchmark harness: medians of several runs, interleaved.

Each candidate is timed in turn within every round, so machine noise hits them alike;
the report prints per-call medians and ratios against a baseline.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import statistics
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from redis_support import RedisCluster, RedisServer


@dataclass
class Result:
    name: str
    samples: list[float] = field(default_factory=list)  # seconds per call, one per round

    @property
    def median(self) -> float:
        return statistics.median(self.samples)


def _time_sync(fn: Callable[[], object], number: int) -> float:
    start = time.perf_counter()
    for _ in range(number):
        fn()
    return (time.perf_counter() - start) / number


async def _time_async(fn: Callable[[], Awaitable[object]], number: int) -> float:
    start = time.perf_counter()
    for _ in range(number):
        await fn()
    return (time.perf_counter() - start) / number


def compare_sync(candidates: dict[str, Callable[[], object]], *, number: int, rounds: int) -> list[Result]:
    results = [Result(name) for name in candidates]
    fns = list(candidates.values())
    for fn in fns:  # warm up
        _time_sync(fn, max(number // 10, 1))
    gc.disable()
    try:
        for _ in range(rounds):
            for result, fn in zip(results, fns, strict=True):
                result.samples.append(_time_sync(fn, number))
    finally:
        gc.enable()
    return results


def compare_async(candidates: dict[str, Callable[[], Awaitable[object]]], *, number: int, rounds: int) -> list[Result]:
    async def run() -> list[Result]:
        results = [Result(name) for name in candidates]
        fns = list(candidates.values())
        for fn in fns:
            await _time_async(fn, max(number // 10, 1))
        gc.disable()
        try:
            for _ in range(rounds):
                for result, fn in zip(results, fns, strict=True):
                    result.samples.append(await _time_async(fn, number))
        finally:
            gc.enable()
        return results

    return asyncio.run(run())


def report(title: str, results: list[Result], *, baseline: str) -> str:
    base = next(r for r in results if r.name == baseline).median
    lines = [f"### {title}", "", "| candidate | median per call | vs baseline |", "|---|---:|---:|"]
    for result in results:
        lines.append(f"| {result.name} | {result.median * 1e9:,.0f} ns | {result.median / base:.2f}x |")
    return "\n".join(lines)


def write_section(path: Path, heading: str, section: str) -> None:
    """Replace the section of `path` that starts with `heading` (up to the next `## `) by `section`.

    Appended when `path` has no such section; a missing file starts as `# Performance`.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    existing = path.read_text() if path.exists() else "# Performance\n"
    start = existing.find(heading)
    if start == -1:
        updated = existing.rstrip("\n") + "\n\n" + section
    else:
        end = existing.find("\n## ", start + 1)
        tail = "" if end == -1 else existing[end:]
        updated = existing[:start] + section.rstrip("\n") + "\n" + tail
    path.write_text(updated.rstrip("\n") + "\n")


# -- Redis: the benchmarks that need one put tests/ (`redis_support`) on sys.path ----------------


@contextlib.contextmanager
def redis_server() -> Iterator[RedisServer]:
    """A redis-server of the benchmark's own, on a free local port (never the user's database)."""
    from redis_support import RedisServer

    server = RedisServer()
    server.start()
    try:
        yield server
    finally:
        server.close()


_NOT_COUNTED = frozenset({"info", "cluster|nodes", "cluster|slots", "cluster|shards", "command|docs"})
"""The benchmark's own reads and a Cluster client's topology reads."""


def server_profile(server: RedisServer | RedisCluster) -> Counter[str]:
    """Calls per command so far (`INFO commandstats`, scripts' commands included; summed over a Cluster's masters)."""
    from redis_support import RedisCluster

    calls: Counter[str] = Counter()
    for node in server.nodes if isinstance(server, RedisCluster) else [server]:
        for line in node.command("INFO", "commandstats").split("\r\n"):
            if line.startswith("cmdstat_"):
                name, _, rest = line.removeprefix("cmdstat_").partition(":")
                if name not in _NOT_COUNTED:
                    calls[name] += int(rest.split("calls=")[1].split(",")[0])
    return calls
