"""Semaphore hand-offs on Redis: what a release costs the server when waiters queue.

Not a test. Starts its own redis-server on a free local port (never the user's database).

Workers (threads of one process, each with the `semaphore` primitive over one client) loop on
ONE key: wait for slots (`run(key, fn, wait=60, permits=p)`), hold them ~1 ms, think ~5 ms.

1. `limit 2, 8 workers x 1 permit`: the hand-off of single slots;
2. `limit 4, 8 workers x 1-3 permits`: mixed requests (the big ones must not starve).

Reported: critical sections per second, server commands per section (`INFO commandstats`,
commands run inside scripts included), script calls per section (the acquire and the release,
plus the checks and retries of waiters woken: a thundering herd shows here), and the longest
wait per request size. Then the cost of one release with 8 waiters queued (4 slots freed: 4 named).

    python benchmarks/semaphore_permits.py [--seconds 3] [--write docs/performance.md]
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import redis

_HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(_HERE.parent / "tests"))
sys.path.insert(0, str(_HERE.parent))

from benchmarks._harness import redis_server, server_profile, write_section
from resilience.primitives import semaphore
from resilience.stores import RedisSemaphoreStore

if TYPE_CHECKING:
    from collections import Counter

    from redis_support import RedisServer

SECTION = "## Semaphore permits on Redis"


def contention(
    server: RedisServer, *, limit: int, asks: tuple[int, ...], seconds: float, workers: int = 8
) -> dict[str, Any]:
    client = redis.Redis(port=server.port)
    slots = semaphore(client, limit=limit, ttl=10)
    key = f"bench:{limit}:{len(asks)}:{time.monotonic_ns()}"
    sections = [0] * workers
    longest: dict[int, float] = {}
    stop = time.monotonic() + seconds
    guard = threading.Lock()

    def worker(index: int) -> None:
        rng = random.Random(index)
        while time.monotonic() < stop:
            permits = asks[index % len(asks)]
            asked = time.monotonic()
            extra = {} if permits == 1 else {"permits": permits}

            def body(_handle: object, asked: float = asked, permits: int = permits) -> None:
                waited = time.monotonic() - asked
                with guard:
                    longest[permits] = max(longest.get(permits, 0.0), waited)
                time.sleep(0.001)

            slots.run(key, body, wait=60, **extra)
            sections[index] += 1
            time.sleep(0.005 * rng.uniform(0.5, 1.5))

    before = server_profile(server)
    threads = [threading.Thread(target=worker, args=(i,)) for i in range(workers)]
    started = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.monotonic() - started
    spent = server_profile(server) - before
    done = sum(sections)
    slots.close()
    client.close()
    return {
        "per_second": done / elapsed,
        "commands": sum(spent.values()) / done,
        "scripts": spent.get("evalsha", 0) / done,
        "publishes": spent.get("publish", 0) / done,
        "longest": longest,
    }


def release_cost(server: RedisServer) -> Counter[str]:
    store = RedisSemaphoreStore(redis.Redis(port=server.port), prefix="cost")
    store.acquire("k", "warm", 30, 4)
    store.release("k", "warm")
    try:
        store.acquire("k", "holder", 30, 4, 4)
        extra: tuple[int, ...] = ()
    except TypeError:  # a version without permits: four holders of one slot
        extra = (1,)
        for index in range(4):
            store.acquire("k", f"holder{index}", 30, 4)
    for index in range(8):
        store.acquire_or_queue("k", f"w{index}", 30, 4)
    before = server_profile(server)
    if extra:
        for index in range(4):
            store.release("k", f"holder{index}")
    else:
        store.release("k", "holder")
    spent = server_profile(server) - before
    store.close()
    return spent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--write", type=Path, help=f"replace the '{SECTION}' section of this file")
    options = parser.parse_args()
    with redis_server() as server:
        single = contention(server, limit=2, asks=(1,), seconds=options.seconds)
        try:
            mixed = contention(server, limit=4, asks=(1, 2, 3, 1), seconds=options.seconds)
        except TypeError:
            mixed = None  # a version without permits
        spent = release_cost(server)
    load = os.getloadavg()[0]
    lines = [
        SECTION,
        "",
        (
            f"`python benchmarks/semaphore_permits.py --seconds {options.seconds:g}` (Python "
            f"{platform.python_version()}, one local redis-server, load average {load:.1f}). 8 threads loop on one key: "
            "wait for slots, hold ~1 ms, think ~5 ms. Commands as `INFO commandstats` counts them (inside scripts too)."
        ),
        "",
        "| run | sections/s | server commands / section | script calls / section | PUBLISH / section | longest wait by permits |",
        "|---|---|---|---|---|---|",
    ]
    for name, result in (("limit 2, 8 x 1 permit", single), ("limit 4, 8 x 1/2/3 permits", mixed)):
        if result is None:
            continue
        waits = ", ".join(f"{p}: {w * 1000:.0f} ms" for p, w in sorted(result["longest"].items()))
        lines.append(
            f"| {name} | {result['per_second']:.0f} | {result['commands']:.1f} | {result['scripts']:.2f} | "
            f"{result['publishes']:.2f} | {waits} |"
        )
    lines += [
        "",
        (
            f"One release of 4 slots with 8 waiters queued: {sum(spent.values())} server commands, "
            f"{spent.get('publish', 0)} of them `PUBLISH` ({', '.join(f'{k} {v}' for k, v in sorted(spent.items()) if v)})."
        ),
        "",
    ]
    text = "\n".join(lines)
    print(text)
    if options.write:
        write_section(options.write, SECTION, text)


if __name__ == "__main__":
    main()
