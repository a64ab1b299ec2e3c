"""Contended hand-off and many leases on Redis: the primitives against what a user would pick.

Not a test. Starts its own redis-server on a free local port (never the user's database).

1. Contention: 8 workers (threads, then asyncio tasks) loop on ONE key: wait for the lock, hold
   it ~1 ms, release, think ~5 ms. Contenders (all in one run, each for `--seconds`):

   - `resilience` primitive `lock(client).run(key, fn, wait=60)`: waiters queue FIFO in Redis
     and a release wakes only the head (pub/sub, one subscription per process);
   - `resilience` pipeline lock strategy with `wait=` (the same queue and wake-up);
   - redis-py `Lock` (blocking acquire, default `sleep=0.1` polling, and `sleep=0.001`);
   - python-redis-lock (blocking acquire, woken by BLPOP on a signal list).

   Reported: critical sections per second, median hand-off (the holder's body ends -> the next
   holder's body starts: release round trip + wake-up + acquire round trip), p99 and longest
   wait, per-worker spread (most / fewest sections of one worker), and Redis commands per
   section, counted twice: round trips the clients sent (`send_packed_command`) and the
   server's `INFO commandstats` delta (which also counts commands run inside scripts), with
   the primitive's per-command profile. The primitive also runs on a 3-master Redis Cluster
   of its own (the key on one master; `--no-cluster` skips it).

2. Many leases: 1,000 leases held at once by one process (`hold`, ttl 1 s, heartbeat ttl/4) for
   several renewal rounds: leases lost (target 0), CPU and memory per held lease.

    python benchmarks/redis_contention.py [--seconds 3] [--leases 1000] [--write docs/performance.md]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import contextvars
import os
import platform
import statistics
import sys
import threading
import time
import tracemalloc
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import redis
import redis.asyncio
import redis.asyncio.connection
import redis.cluster
import redis.connection

# python-redis-lock's module is `redis_lock`, like a sibling benchmark: keep this folder off the path.
_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]
sys.path.insert(0, str(_HERE.parent / "tests"))
sys.path.insert(0, str(_HERE.parent))  # the repository: `benchmarks._harness`
import itertools
from collections import Counter

from redis_support import RedisCluster, RedisServer

from benchmarks._harness import redis_server, server_profile, write_section
from resilience import LockLostError, ResiliencePipelineBuilder
from resilience._lease import wait_idle
from resilience.primitives import lock
from resilience.stores import RedisLockStore

if TYPE_CHECKING:
    from collections.abc import Callable

WORKERS = 8
HOLD = 0.001
THINK = 0.005
KEY = "bench:contended"
SECTION = "## Redis: contention and many leases"


# -- counting round trips -------------------------------------------------------------------------

_SENT = [0]


def _count_sends() -> None:
    """Count every command write of every redis-py connection (sync and asyncio)."""
    for cls in (redis.connection.AbstractConnection, redis.asyncio.connection.AbstractConnection):
        original = cls.send_packed_command

        if asyncio.iscoroutinefunction(original):

            async def counted_async(self: Any, *args: Any, _original: Any = original, **kwargs: Any) -> Any:
                _SENT[0] += 1
                return await _original(self, *args, **kwargs)

            cls.send_packed_command = counted_async  # type: ignore[method-assign]
        else:

            def counted(self: Any, *args: Any, _original: Any = original, **kwargs: Any) -> Any:
                _SENT[0] += 1
                return _original(self, *args, **kwargs)

            cls.send_packed_command = counted  # type: ignore[method-assign]


def _server_calls(server: RedisServer | RedisCluster) -> int:
    return server_profile(server).total()


# -- one measurement ------------------------------------------------------------------------------


@dataclass
class Record:
    """What the workers of one contender saw."""

    sections: list[tuple[float, float, int]] = field(default_factory=list)  # (body start, body end, worker)
    waits: list[float] = field(default_factory=list)
    guard: threading.Lock = field(default_factory=threading.Lock)
    inside: int = 0
    overlaps: int = 0

    def enter(self, asked: float) -> float:
        start = time.perf_counter()
        with self.guard:
            self.inside += 1
            if self.inside > 1:
                self.overlaps += 1
            self.waits.append(start - asked)
        return start

    def leave(self, start: float, worker: int) -> None:
        end = time.perf_counter()
        with self.guard:
            self.inside -= 1
            self.sections.append((start, end, worker))


@dataclass
class Result:
    name: str
    per_second: float
    handoff_ms: float
    p99_wait_ms: float
    longest_wait_ms: float
    spread: float
    sent_per_section: float
    server_per_section: float
    overlaps: int
    profile: dict[str, float]  # server commands per section, by command


def summarize(name: str, record: Record, seconds: float, sent: int, server: Counter[str]) -> Result:
    sections = sorted(record.sections)
    handoffs = [b[0] - a[1] for a, b in itertools.pairwise(sections) if b[0] >= a[1]]
    counts = [sum(1 for s in sections if s[2] == w) for w in range(WORKERS)]
    waits = sorted(record.waits)
    n = max(1, len(sections))
    return Result(
        name=name,
        per_second=len(sections) / seconds,
        handoff_ms=statistics.median(handoffs) * 1000 if handoffs else float("nan"),
        p99_wait_ms=waits[int(0.99 * (len(waits) - 1))] * 1000 if waits else float("nan"),
        longest_wait_ms=waits[-1] * 1000 if waits else float("nan"),
        spread=max(counts) / max(1, min(counts)),
        sent_per_section=sent / n,
        server_per_section=server.total() / n,
        overlaps=record.overlaps,
        profile={command: calls / n for command, calls in server.most_common()},
    )


def measure_threads(
    name: str, server: RedisServer | RedisCluster, seconds: float, section: Callable[[int, Record, float], None]
) -> Result:
    """`section(worker, record, asked)` takes the lock, runs one body (enter/hold/leave), releases."""
    record = Record()
    stop = threading.Event()
    barrier = threading.Barrier(WORKERS + 1)

    def worker(index: int) -> None:
        barrier.wait()
        while not stop.is_set():
            section(index, record, time.perf_counter())
            time.sleep(THINK)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(WORKERS)]
    for thread in threads:
        thread.start()
    sent0, server0 = _SENT[0], server_profile(server)
    barrier.wait()
    started = time.perf_counter()
    time.sleep(seconds)
    stop.set()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - started
    return summarize(name, record, elapsed, _SENT[0] - sent0, server_profile(server) - server0)


async def measure_tasks(name: str, server: RedisServer, seconds: float, section: Any) -> Result:
    """The asyncio twin of `measure_threads` (`section` is a coroutine function)."""
    record = Record()
    stop = asyncio.Event()

    async def worker(index: int) -> None:
        while not stop.is_set():
            await section(index, record, time.perf_counter())
            await asyncio.sleep(THINK)

    sent0, server0 = _SENT[0], server_profile(server)
    started = time.perf_counter()
    tasks = [asyncio.create_task(worker(i)) for i in range(WORKERS)]
    await asyncio.sleep(seconds)
    stop.set()
    await asyncio.gather(*tasks)
    elapsed = time.perf_counter() - started
    return summarize(name, record, elapsed, _SENT[0] - sent0, server_profile(server) - server0)


# -- the contenders -------------------------------------------------------------------------------


def thread_contenders(client: Any, *, ours_only: bool = False) -> dict[str, Callable[[int, Record, float], None]]:
    locks = lock(client, ttl=10)

    def primitive(worker: int, record: Record, asked: float) -> None:
        def body(handle: Any) -> None:
            start = record.enter(asked)
            time.sleep(HOLD)
            record.leave(start, worker)

        locks.run(KEY + ":prim", body, wait=60)

    if ours_only:
        return {"resilience lock().run(wait=60)": primitive}
    pipeline = (
        ResiliencePipelineBuilder().add_lock(KEY + ":pipe", ttl=10, wait=60, store=RedisLockStore(client)).build()
    )

    def strategy(worker: int, record: Record, asked: float) -> None:
        def body() -> None:
            start = record.enter(asked)
            time.sleep(HOLD)
            record.leave(start, worker)

        pipeline.execute(body)

    def redis_py(worker: int, record: Record, asked: float) -> None:
        held = client.lock(KEY + ":redis-py", timeout=10)  # default sleep=0.1
        assert held.acquire(blocking=True)
        start = record.enter(asked)
        time.sleep(HOLD)
        record.leave(start, worker)
        held.release()

    def redis_py_fast(worker: int, record: Record, asked: float) -> None:
        held = client.lock(KEY + ":redis-py-fast", timeout=10, sleep=0.001)
        assert held.acquire(blocking=True)
        start = record.enter(asked)
        time.sleep(HOLD)
        record.leave(start, worker)
        held.release()

    contenders: dict[str, Callable[[int, Record, float], None]] = {
        "resilience lock().run(wait=60)": primitive,
        "resilience pipeline add_lock(wait=60)": strategy,
        "redis-py Lock (sleep=0.1)": redis_py,
        "redis-py Lock (sleep=0.001)": redis_py_fast,
    }
    try:
        import redis_lock

        def python_redis_lock(worker: int, record: Record, asked: float) -> None:
            held = redis_lock.Lock(client, KEY + ":prl", expire=10)
            assert held.acquire(blocking=True)
            start = record.enter(asked)
            time.sleep(HOLD)
            record.leave(start, worker)
            held.release()

        contenders["python-redis-lock"] = python_redis_lock
    except ImportError:
        pass
    return contenders


async def task_results(server: RedisServer, seconds: float) -> list[Result]:
    client = redis.asyncio.Redis(port=server.port)
    locks = lock(client, ttl=10)

    async def primitive(worker: int, record: Record, asked: float) -> None:
        async def body(handle: Any) -> None:
            start = record.enter(asked)
            await asyncio.sleep(HOLD)
            record.leave(start, worker)

        await locks.run_async(KEY + ":aprim", body, wait=60)

    async def redis_py(worker: int, record: Record, asked: float) -> None:
        held = client.lock(KEY + ":aredis-py", timeout=10)
        assert await held.acquire(blocking=True)
        start = record.enter(asked)
        await asyncio.sleep(HOLD)
        record.leave(start, worker)
        await held.release()

    try:
        return [
            await measure_tasks("resilience lock().run_async(wait=60)", server, seconds, primitive),
            await measure_tasks("redis-py asyncio Lock (sleep=0.1)", server, seconds, redis_py),
        ]
    finally:
        await locks.aclose()
        await client.aclose()


# -- many leases ----------------------------------------------------------------------------------


@dataclass
class ManyLeases:
    leases: int
    ttl: float
    held_seconds: float
    lost: int
    renewals: int
    cpu_us_per_lease_second: float
    memory_bytes_per_lease: float
    acquire_seconds: float


def many_leases(server: RedisServer, count: int, ttl: float, rounds: int) -> ManyLeases:
    client = redis.Redis(port=server.port)
    locks = lock(client, ttl=ttl, prefix="bench-many")
    held_seconds = rounds * ttl
    lost = 0
    calls0 = _server_renewals(server)
    tracemalloc.start()
    try:
        # Independent leases: each hold in a context of its own (entered one inside the other,
        # the later ones would be nested locks whose signals follow the earlier ones).
        holds = [(contextvars.Context(), locks.hold(f"lease:{i}")) for i in range(count)]
        base = tracemalloc.get_traced_memory()[0]
        started = time.perf_counter()
        handles = [context.run(hold.__enter__) for context, hold in holds]
        acquired = time.perf_counter() - started
        memory = (tracemalloc.get_traced_memory()[0] - base) / count
        tracemalloc.stop()
        cpu0 = time.process_time()
        time.sleep(held_seconds)
        cpu = time.process_time() - cpu0
        lost = sum(1 for handle in handles if handle.signal.aborted)
        for context, hold in holds:
            with contextlib.suppress(LockLostError):
                context.run(hold.__exit__, None, None, None)
    finally:
        if tracemalloc.is_tracing():
            tracemalloc.stop()
        wait_idle()
        locks.close()
        client.close()
    renewals = _server_renewals(server) - calls0
    return ManyLeases(
        leases=count,
        ttl=ttl,
        held_seconds=held_seconds,
        lost=lost,
        renewals=renewals,
        cpu_us_per_lease_second=cpu / held_seconds / count * 1e6,
        memory_bytes_per_lease=memory,
        acquire_seconds=acquired,
    )


def _server_renewals(server: RedisServer) -> int:
    return _server_calls(server)


# -- report ---------------------------------------------------------------------------------------


def targets(threads: list[Result], tasks: list[Result], cluster: Result | None) -> list[str]:
    """The issue's targets for `lock().run(wait=60)` with threads, each marked met or not met."""
    ours = threads[0]
    ours_async = tasks[0]
    peer = next((r for r in threads if r.name == "python-redis-lock"), None)
    redis_py = next((r for r in threads if r.name.startswith("redis-py Lock (sleep=0.001")), None)
    ratio = ours.per_second / peer.per_second if peer else float("nan")
    peers = ", ".join(f"{r.name} {r.server_per_section:.1f}" for r in (peer, redis_py) if r is not None)
    checks = [
        (
            "server commands per section (INFO commandstats, inside scripts included) <= 12",
            f"{ours.server_per_section:.1f} threads, {ours_async.server_per_section:.1f} asyncio"
            + (f", {cluster.server_per_section:.1f} on Cluster" if cluster else "")
            + f" ({peers}); {ours.sent_per_section:.1f} round trips",
            ours.server_per_section <= 12,
        ),
        (
            "sections/s >= 1.1x python-redis-lock's",
            f"{ours.per_second:,.0f} vs {peer.per_second:,.0f} ({ratio:.2f}x)" if peer else "not installed",
            peer is not None and ratio >= 1.1,
        ),
        (
            "median hand-off <= 0.3 ms",
            f"{ours.handoff_ms:.2f} ms" + (f" (python-redis-lock {peer.handoff_ms:.2f} ms)" if peer else ""),
            ours.handoff_ms <= 0.3,
        ),
        ("longest wait <= 40 ms", f"{ours.longest_wait_ms:.1f} ms", ours.longest_wait_ms <= 40),
        ("per-worker spread <= 1.1", f"{ours.spread:.2f}", ours.spread <= 1.1),
    ]
    if cluster is not None:
        checks.append(
            (
                "Cluster (3 masters, the key on one): no more commands per section than standalone",
                f"{cluster.server_per_section:.1f} vs {ours.server_per_section:.1f}",
                cluster.server_per_section <= ours.server_per_section + 0.5,
            )
        )
    lines = [
        "Targets, for `lock().run(wait=60)` with threads (this run):",
        "",
        "| target | measured | |",
        "|---|---:|---|",
    ]
    lines += [f"| {what} | {value} | {'met' if ok else '**not met**'} |" for what, value, ok in checks]
    profile = ", ".join(f"{command} {calls:.1f}" for command, calls in ours.profile.items() if calls >= 0.05)
    async_profile = ", ".join(
        f"{command} {calls:.1f}" for command, calls in ours_async.profile.items() if calls >= 0.05
    )
    lines += [
        "",
        f"Server commands per section, by command (threads): {profile}.",
        "",
        f"asyncio: {async_profile}.",
    ]
    return [*lines, "", *ANALYSIS]


ANALYSIS = [
    "Where the commands go. A contended section is three scripts: the waiter's first attempt",
    "(refused: it joins the FIFO queue with one `ZADD NX` scored by the server time, checks the",
    "queue's bound with `ZCARD`, and reads the holder's time left; the queue key's expiry was set",
    "by an earlier waiter, as the lock hash's `q` tells), the holder's release, which hands the",
    "lock straight to the live head of the queue (new owner, fresh token, one `PUBLISH` naming the",
    "head only), and the head's attempt, which finds itself the owner and sets its own ttl",
    "(`HMGET`, `PEXPIRE`). Each script also counts as a command (`EVALSHA`), and the token needs",
    "the server clock (`TIME`) at every grant. That is 17 commands; python-redis-lock's 10 buy no",
    "fencing token, no FIFO order and no expiry hand-off. An asyncio waiter costs the same:",
    "subscribed before its attempt, it needs no check of its turn (its listener keeps a turn",
    "announced while the attempt's reply was on its way).",
    "The hand-off gap is the release's round trip, the message, two thread hand-overs (the",
    "listener thread wakes the waiting thread) and the head's round trip for its token.",
]


def results_table(title: str, results: list[Result]) -> list[str]:
    lines = [
        f"**{title}** ({WORKERS} workers, hold {HOLD * 1000:g} ms, think {THINK * 1000:g} ms, one key)",
        "",
        (
            "| contender | sections/s | median hand-off | p99 wait | longest wait | spread | round trips/section |"
            " server commands/section |"
        ),
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    lines += [
        f"| {r.name} | {r.per_second:,.0f} | {r.handoff_ms:.2f} ms | {r.p99_wait_ms:.1f} ms | "
        f"{r.longest_wait_ms:.1f} ms | {r.spread:.2f} | {r.sent_per_section:.1f} | {r.server_per_section:.1f} |"
        + (f" **{r.overlaps} overlaps**" if r.overlaps else "")
        for r in results
    ]
    return lines


def cluster_result(seconds: float) -> Result:
    """The primitive with threads on a 3-master Redis Cluster (its own servers), the key on one master."""
    cluster = RedisCluster()
    cluster.start()
    try:
        client = redis.cluster.RedisCluster(host="127.0.0.1", port=cluster.port)
        try:
            section = thread_contenders(client, ours_only=True)["resilience lock().run(wait=60)"]
            return measure_threads("resilience lock().run(wait=60), Cluster", cluster, seconds, section)
        finally:
            client.close()
    finally:
        cluster.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=3.0, help="run time of each contender")
    parser.add_argument("--leases", type=int, default=1000)
    parser.add_argument("--lease-ttl", type=float, default=1.0)
    parser.add_argument("--rounds", type=int, default=5, help="how many ttls the leases are held")
    parser.add_argument("--no-cluster", action="store_true", help="skip the Redis Cluster run")
    parser.add_argument("--write", type=Path, help=f"replace the '{SECTION}' section of this file")
    options = parser.parse_args()
    _count_sends()
    with redis_server() as server:
        version = server.command("INFO", "server").split("redis_version:")[1].split("\r\n")[0]
        client = redis.Redis(port=server.port)
        try:
            threads = [
                measure_threads(name, server, options.seconds, section)
                for name, section in thread_contenders(client).items()
            ]
        finally:
            client.close()
        tasks = asyncio.run(task_results(server, options.seconds))
        many = many_leases(server, options.leases, options.lease_ttl, options.rounds)
    cluster = None if options.no_cluster else cluster_result(options.seconds)
    lines = [
        SECTION,
        "",
        (
            f"`python benchmarks/redis_contention.py` — Python {platform.python_version()}, redis-py "
            f"{redis.__version__}, Redis {version} on localhost, {platform.machine()}, "
            f"load average {os.getloadavg()[0]:.1f} when it started (numbers move with it: compare rows of one run)."
        ),
        "",
        *results_table("Threads", threads),
        "",
        *results_table("asyncio tasks", tasks),
        "",
        (
            f"**Many leases**: {many.leases} leases held at once by one process (`hold`, ttl {many.ttl:g} s, "
            f"heartbeat ttl/4) for {many.held_seconds:g} s: **{many.lost} lost**; "
            f"{many.renewals} server commands while held and released; taking them all took "
            f"{many.acquire_seconds:.2f} s; CPU {many.cpu_us_per_lease_second:.0f} µs per lease per second held; "
            f"memory {many.memory_bytes_per_lease:,.0f} B per held lease (tracemalloc)."
        ),
    ]
    if cluster is not None:
        lines += ["", *results_table("Threads on Redis Cluster (3 masters, the key on one)", [cluster])]
    lines += ["", *targets(threads, tasks, cluster)]
    text = "\n".join(lines) + "\n"
    print(text)
    if options.write:
        write_section(options.write, SECTION, text)


if __name__ == "__main__":
    main()
