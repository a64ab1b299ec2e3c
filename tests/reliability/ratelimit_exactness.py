"""The rate limiter's exactness run: processes x threads hammering one Redis partition.

`run(...)` starts `processes` worker processes (`python -m tests.reliability.ratelimit_exactness`),
each with `threads` threads and a client per thread, all taking permits of one partition of
`limit` per `per` seconds from the same instant for `seconds`. A refused thread sleeps the
retry-after it was told, then asks again, so the limit is contended all the time. Each grant
is logged with the wall-clock times its request was sent and its answer received: the
server decided in between (the server's `TIME` and `time.time()` read the same clock here).

`check(...)` then verifies both directions:

- **No over-admission**: in any interval, the grants *certainly* inside it (sent after its
  start, answered before its end) never exceed the algorithm's bound for that length —
  token bucket `burst + length x rate`; sliding window `limit` per `per`; fixed window
  `2 x limit` per `per`, and in total `limit` per window opened.
- **No needless under-admission**: the grants reach at least `utilization` of the most the
  algorithm could have granted over the run.
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

__all__ = ["Report", "check", "run"]


@dataclass
class Report:
    """What a run admitted, against the algorithm's bounds."""

    algorithm: str
    limit: int
    per: float
    seconds: float
    grants: list[tuple[float, float]]
    refusals: int
    bound: float
    """The most the algorithm could have granted over the run."""
    worst: dict[float, tuple[int, float]] = field(default_factory=dict)
    """Per interval length: (the most grants certainly inside one interval, the bound)."""

    @property
    def admitted(self) -> int:
        """Permits granted over the run."""
        return len(self.grants)

    @property
    def utilization(self) -> float:
        """Admitted over the most that could have been."""
        return self.admitted / self.bound

    @property
    def over_admitted(self) -> bool:
        """True if some interval certainly held more grants than the bound allows."""
        return any(count > bound for count, bound in self.worst.values())

    def summary(self) -> str:
        """One line for the benchmark and the test's failure message."""
        worst = ", ".join(f"{length:g}s: {count}/{bound:g}" for length, (count, bound) in sorted(self.worst.items()))
        return (
            f"{self.algorithm}: admitted {self.admitted} of at most {self.bound:g} "
            f"({self.utilization:.1%}), {self.refusals} refusals; worst window {worst}"
        )


def _most_inside(grants: list[tuple[float, float]], length: float) -> int:
    """The most grants certainly inside one interval of `length` (sent at or after its start, answered before its end)."""
    by_send = sorted(grants)
    most = 0
    for i, (start, _) in enumerate(by_send):
        end = start + length
        count = sum(1 for send, recv in by_send[i:] if send < end and recv < end)
        most = max(most, count)
    return most


def check(
    algorithm: str, grants: list[tuple[float, float]], *, limit: int, per: float, burst: int, seconds: float
) -> tuple[float, dict[float, tuple[int, float]]]:
    """The algorithm's bound over the run, and per interval length the worst count and its bound."""
    worst: dict[float, tuple[int, float]] = {}
    if algorithm == "token_bucket":
        rate = limit / per
        for length in (per / 10, per / 2, per, 2 * per):
            worst[length] = (_most_inside(grants, length), math.floor(burst + length * rate + 1e-9))
        return burst + seconds * rate, worst
    windows = math.ceil(seconds / per - 1e-9)
    if algorithm == "sliding_window":
        worst[per] = (_most_inside(grants, per), limit)
        return limit * windows, worst
    worst[per] = (_most_inside(grants, per), 2 * limit)
    # A window opens at the first request after the last one ended: at most this many fit.
    worst[seconds] = (len(grants), limit * (math.floor(seconds / per) + 1))
    return limit * windows, worst


# -- the worker process -------------------------------------------------------------------------


def _worker(args: argparse.Namespace) -> None:
    import redis

    from resilience.limiters import RedisRateLimitStore

    stores = [RedisRateLimitStore(redis.Redis(port=args.port)) for _ in range(args.threads)]
    for store in stores:  # connect and load the script before the start
        store.take(f"{args.key}:warmup", 1, 1.0, None, args.algorithm)
    print("ready", flush=True)  # noqa: T201 - the parent waits for this line
    start, end = map(float, sys.stdin.readline().split())
    grants: list[tuple[float, float]] = []
    refusals = [0]
    lock = threading.Lock()

    def hammer(store: RedisRateLimitStore) -> None:
        mine: list[tuple[float, float]] = []
        refused = 0
        time.sleep(max(0.0, start - time.time()))
        while True:
            sent = time.time()
            if sent >= end:
                break
            wait = store.take(args.key, args.limit, args.per, args.burst, args.algorithm)
            received = time.time()
            if wait == 0.0:
                if received < end:
                    mine.append((sent, received))
            else:
                refused += 1
                time.sleep(min(wait, max(0.0, end - received)))
        with lock:
            grants.extend(mine)
            refusals[0] += refused

    threads = [threading.Thread(target=hammer, args=(store,)) for store in stores]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    print(json.dumps({"grants": grants, "refusals": refusals[0]}), flush=True)  # noqa: T201 - the report


def run(
    port: int,
    key: str,
    algorithm: str,
    *,
    processes: int = 4,
    threads: int = 2,
    seconds: float = 3.0,
    limit: int = 50,
    per: float = 1.0,
    burst: int | None = None,
) -> Report:
    """Run the workers against the server on `port` and check what they were granted."""
    args = [sys.executable, "-m", "tests.reliability.ratelimit_exactness", "--port", str(port), "--key", key]
    args += ["--algorithm", algorithm, "--threads", str(threads), "--limit", str(limit), "--per", str(per)]
    if burst is not None:
        args += ["--burst", str(burst)]
    workers = [
        subprocess.Popen(args, cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        for _ in range(processes)
    ]
    try:
        for worker in workers:
            assert worker.stdout is not None
            line = worker.stdout.readline()
            assert line.strip() == "ready", f"a worker did not start: {line!r}"
        start = time.time() + 0.3
        for worker in workers:
            assert worker.stdin is not None
            worker.stdin.write(f"{start} {start + seconds}\n")
            worker.stdin.flush()
        grants: list[tuple[float, float]] = []
        refusals = 0
        for worker in workers:
            out, _ = worker.communicate(timeout=seconds + 60)
            result = json.loads(out.strip().splitlines()[-1])
            grants.extend((float(s), float(r)) for s, r in result["grants"])
            refusals += result["refusals"]
    finally:
        for worker in workers:
            if worker.poll() is None:
                worker.kill()
                worker.wait(10)
    bound, worst = check(algorithm, grants, limit=limit, per=per, burst=burst or limit, seconds=seconds)
    return Report(algorithm, limit, per, seconds, grants, refusals, bound, worst)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--key", required=True)
    parser.add_argument("--algorithm", required=True)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--limit", type=int, default=50)
    parser.add_argument("--per", type=float, default=1.0)
    parser.add_argument("--burst", type=int, default=None)
    _worker(parser.parse_args())
