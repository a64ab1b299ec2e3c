"""Leader election hand-off: how long a candidate in line takes to lead after the leader steps down.

Not a test. Starts its own redis-server on a free local port (never the user's database).

Two candidates (threads, then asyncio tasks) take turns on one election: the leader leads for
~1 ms and returns from `lead` (stepping down: the lease is released), then runs for election
again and waits in line while the other leads. The hand-off is measured from the moment `lead`
returns to the moment the next `lead` starts (release round trip + the head's wake-up by
pub/sub + its acquire round trip), on the memory store and on Redis.

    python benchmarks/election_handoff.py [--handoffs 300] [--write docs/performance.md]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import redis
import redis.asyncio

_HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(_HERE.parent / "tests"))
sys.path.insert(0, str(_HERE.parent))

from benchmarks._harness import redis_server, write_section
from resilience.primitives import election
from resilience.stores import MemoryLockStore

if TYPE_CHECKING:
    from collections.abc import Callable

    from resilience.primitives import LockHandle

SECTION = "## Leader election hand-off"


def measure_threads(make_client: Callable[[], Any], handoffs: int) -> list[float]:
    """Two candidate threads taking turns; the hand-off times in seconds."""
    ended: list[float] = []
    gaps: list[float] = []
    guard = threading.Lock()
    done = threading.Event()

    def candidate(name: str) -> None:
        e = election(make_client(), "bench", identity=name, ttl=10)

        def lead(handle: LockHandle) -> None:
            started = time.perf_counter()
            with guard:
                if ended:
                    gaps.append(started - ended[-1])
                if len(gaps) >= handoffs:
                    done.set()
            time.sleep(0.001)
            with guard:
                ended.append(time.perf_counter())

        while not done.is_set():
            e.run(lead, wait=30)
        e.close()

    threads = [threading.Thread(target=candidate, args=(f"c{n}",)) for n in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return gaps[:handoffs]


async def measure_tasks(make_client: Callable[[], Any], handoffs: int) -> list[float]:
    """Two candidate tasks taking turns on one loop; the hand-off times in seconds."""
    ended: list[float] = []
    gaps: list[float] = []
    done = asyncio.Event()

    async def candidate(name: str) -> None:
        e = election(make_client(), "bench-async", identity=name, ttl=10)

        async def lead(handle: LockHandle) -> None:
            started = time.perf_counter()
            if ended:
                gaps.append(started - ended[-1])
            if len(gaps) >= handoffs:
                done.set()
            await asyncio.sleep(0.001)
            ended.append(time.perf_counter())

        while not done.is_set():
            await e.run_async(lead, wait=30)
        await e.aclose()

    await asyncio.gather(candidate("a0"), candidate("a1"))
    return gaps[:handoffs]


def _row(name: str, gaps: list[float]) -> str:
    ms = sorted(gap * 1000 for gap in gaps)
    p99 = ms[min(len(ms) - 1, int(len(ms) * 0.99))]
    return f"| {name} | {len(ms)} | {statistics.median(ms):.2f} | {p99:.2f} | {ms[-1]:.2f} |"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--handoffs", type=int, default=300)
    parser.add_argument("--write", type=Path, help=f"replace the '{SECTION}' section of this file")
    options = parser.parse_args()
    memory = MemoryLockStore()
    rows = [_row("memory store, threads", measure_threads(lambda: memory, options.handoffs))]
    with redis_server() as server:
        rows.append(_row("Redis, threads", measure_threads(lambda: redis.Redis(port=server.port), options.handoffs)))
        rows.append(
            _row(
                "Redis, asyncio tasks",
                asyncio.run(measure_tasks(lambda: redis.asyncio.Redis(port=server.port), options.handoffs)),
            )
        )
    load = os.getloadavg()[0]
    intro = (
        "Two candidates take turns on one election; the hand-off is from the leader's `lead` returning to the"
        f" next leader's `lead` starting (`benchmarks/election_handoff.py`, Python {platform.python_version()},"
        f" load average {load:.1f})."
    )
    section = "\n".join(
        [
            SECTION,
            "",
            intro,
            "",
            "| store | hand-offs | median (ms) | p99 (ms) | longest (ms) |",
            "|---|---|---|---|---|",
            *rows,
            "",
        ]
    )
    print(section)
    if options.write is not None:
        write_section(options.write, SECTION, section)


if __name__ == "__main__":
    main()
