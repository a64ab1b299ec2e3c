"""Uncontended acquire + release on one connection: RedisLockStore against what a user would pick.

Not a test. Starts its own redis-server on a free local port (never the user's database), then
runs every contender side by side, round-robin, several times, and prints the median
operations per second of each and the ratios. Contenders, each one acquire and one release
per operation:

- `resilience` RedisLockStore (fencing token minted in the acquire script);
- a raw redis-py loop of the same two round trips: EVALSHA acquire (SET NX PX + INCR of a
  fencing counter) and EVALSHA compare-and-delete — the floor a hand-written lock sits on;
- redis-py's own `Lock` (SET NX PX, then a compare-and-delete script; no fencing token);
- python-redis-lock and pottery's `Redlock` when installed (`pip install --group bench`, or `make bench`).

    python benchmarks/redis_lock.py [--ops 300] [--runs 25] [--write docs/performance.md]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import os
import platform
import random
import statistics
import sys
import time
import uuid
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import redis
import redis.asyncio
import redis.cluster
import redis.connection

# This file is named like python-redis-lock's module: keep its folder off the import path.
_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]
sys.path.insert(0, str(_HERE.parent / "tests"))
sys.path.insert(0, str(_HERE.parent))  # the repository: `benchmarks._harness`
from redis_support import RedisCluster, RedisServer

from benchmarks._harness import write_section
from resilience.stores import RedisLockStore

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Iterator

TTL = 10.0
OURS = "resilience RedisLockStore"
RAW = "raw redis-py EVALSHA loop"

RAW_ACQUIRE = """
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return redis.call('INCR', KEYS[2])
end
return 0
"""
RAW_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
"""


def sync_contenders(client: redis.Redis) -> dict[str, Callable[[], None]]:
    store = RedisLockStore(client)

    def ours() -> None:
        owner = uuid.uuid4().hex
        token = store.acquire("bench:ours", owner, TTL)
        assert token is not None
        assert store.release("bench:ours", owner)

    acquire_sha = client.script_load(RAW_ACQUIRE)
    release_sha = client.script_load(RAW_RELEASE)
    ttl_ms = int(TTL * 1000)

    def raw() -> None:
        token = uuid.uuid4().hex
        fence = client.evalsha(acquire_sha, 2, "bench:{raw}", "bench:{raw}:fence", token, ttl_ms)
        assert fence
        assert client.evalsha(release_sha, 1, "bench:{raw}", token)

    def redis_py_lock() -> None:
        lock = client.lock("bench:redis-py", timeout=TTL)
        assert lock.acquire(blocking=False)
        lock.release()

    contenders: dict[str, Callable[[], None]] = {
        OURS: ours,
        RAW: raw,
        "redis-py Lock": redis_py_lock,
    }
    try:
        import redis_lock

        def python_redis_lock() -> None:
            lock = redis_lock.Lock(client, "bench:python-redis-lock", expire=int(TTL))
            assert lock.acquire(blocking=False)
            lock.release()

        contenders["python-redis-lock"] = python_redis_lock
    except ImportError:
        pass
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            from pottery import Redlock

        def pottery_redlock() -> None:
            lock = Redlock(key="bench:pottery", masters={client}, auto_release_time=TTL)
            assert lock.acquire(blocking=False)
            lock.release()

        contenders["pottery Redlock"] = pottery_redlock
    except ImportError:
        pass
    return contenders


def async_contenders(client: redis.asyncio.Redis) -> dict[str, Callable[[], Awaitable[None]]]:
    store = RedisLockStore(async_client=client)
    ttl_ms = int(TTL * 1000)
    shas: dict[str, str] = {}

    async def ours() -> None:
        owner = uuid.uuid4().hex
        token = await store.acquire_async("bench:ours", owner, TTL)
        assert token is not None
        assert await store.release_async("bench:ours", owner)

    async def raw() -> None:
        if not shas:
            shas["acquire"] = await client.script_load(RAW_ACQUIRE)
            shas["release"] = await client.script_load(RAW_RELEASE)
        token = uuid.uuid4().hex
        fence = await client.evalsha(shas["acquire"], 2, "bench:{raw}", "bench:{raw}:fence", token, ttl_ms)
        assert fence
        assert await client.evalsha(shas["release"], 1, "bench:{raw}", token)

    async def redis_py_lock() -> None:
        lock = client.lock("bench:redis-py", timeout=TTL)
        assert await lock.acquire(blocking=False)
        await lock.release()

    return {
        OURS: ours,
        RAW: raw,
        "redis-py Lock": redis_py_lock,
    }


@dataclass
class Cost:
    """What one acquire + release cycle costs, measured with the contender running alone."""

    commands: float  # server commands (INFO commandstats, those inside scripts included)
    server_us: float  # the server's time in the commands the client sent (SLOWLOG, scripts' work included)
    round_trips: float  # commands the client sent
    profile: dict[str, float]


def _stats(client: Any) -> dict[str, tuple[int, int]]:
    return {
        name.removeprefix("cmdstat_"): (int(value["calls"]), int(value["usec"]))  # usec: only for the profile
        for name, value in client.info("commandstats").items()
        if name not in {"cmdstat_info", "cmdstat_config|resetstat"} and not name.startswith("cmdstat_cluster")
    }


def _server_seconds(client: Any) -> float:
    """The server's time in the commands clients sent since the last call (SLOWLOG at threshold 0).

    SLOWLOG logs the commands clients send (a script's own commands are part of its time), so
    unlike `INFO commandstats` nothing is counted twice.
    """
    entries = client.slowlog_get(-1)
    client.slowlog_reset()
    skipped = {b"SLOWLOG", b"CONFIG", b"INFO"}
    return sum(entry["duration"] for entry in entries if entry["command"].split(b" ")[0].upper() not in skipped) / 1e6


def cycle_cost(client: Any, operation: Callable[[], None], ops: int = 2000) -> Cost:
    """Server commands, server time and client round trips per cycle of one contender run alone."""
    client.config_set("slowlog-max-len", 4 * ops)
    client.config_set("slowlog-log-slower-than", 0)
    client.config_resetstat()
    _server_seconds(client)
    sent = _SENT[0]
    for _ in range(ops):
        operation()
    sent, spent = _SENT[0] - sent, _server_seconds(client)
    client.config_set("slowlog-log-slower-than", 10_000)
    stats = _stats(client)
    return Cost(
        commands=sum(calls for calls, _ in stats.values()) / ops,
        server_us=spent * 1e6 / ops,
        round_trips=sent / ops,
        profile={name: calls / ops for name, (calls, _) in sorted(stats.items(), key=lambda kv: -kv[1][0])},
    )


_SENT = [0]


def _count_sends() -> None:
    """Count every command the sync redis-py connections write (round trips, pipelines aside)."""
    original = redis.connection.AbstractConnection.send_packed_command

    def counted(self: Any, *args: Any, **kwargs: Any) -> Any:
        _SENT[0] += 1
        return original(self, *args, **kwargs)

    redis.connection.AbstractConnection.send_packed_command = counted  # type: ignore[method-assign]


def cluster_cost() -> Cost:
    """Our cycle on a 3-master Redis Cluster of its own, the key on one master (commands summed over masters)."""
    cluster = RedisCluster()
    cluster.start()
    try:
        client = redis.cluster.RedisCluster(host="127.0.0.1", port=cluster.port)
        store = RedisLockStore(client)

        def ours() -> None:
            owner = uuid.uuid4().hex
            assert store.acquire("bench:ours", owner, TTL) is not None
            assert store.release("bench:ours", owner)

        for _ in range(50):
            ours()
        node = client.get_node_from_key("lock:bench:ours")
        master = redis.Redis(host=node.host, port=node.port)
        try:
            return cycle_cost(master, ours)
        finally:
            master.close()
            client.close()
    finally:
        cluster.close()


def _orders(contenders: dict[str, Any], ops: int, seed: int) -> list[list[tuple[str, Any]]]:
    """A fresh random order of the contenders for every operation.

    Some contenders leave work behind (pottery hands calls to a thread pool), which the next
    operation pays for; shuffling spreads that cost over everyone instead of one neighbour.
    """
    rng = random.Random(seed)
    items = list(contenders.items())
    return [rng.sample(items, len(items)) for _ in range(ops)]


@contextlib.contextmanager
def _gc_paused() -> Iterator[None]:
    """Like timeit: no garbage collection inside a timed run (one contender's garbage is not another's cost)."""
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def run_sync(contenders: dict[str, Callable[[], None]], ops: int, runs: int) -> dict[str, list[float]]:
    """Per run, the operations of all contenders interleave one by one (paired conditions)."""
    for fn in contenders.values():  # warm up: load scripts, open the connection
        for _ in range(50):
            fn()
    rates: dict[str, list[float]] = {name: [] for name in contenders}
    clock = time.perf_counter_ns
    for run in range(runs):
        orders = _orders(contenders, ops, seed=run)
        spent = dict.fromkeys(contenders, 0)
        with _gc_paused():
            for order in orders:
                for name, fn in order:
                    started = clock()
                    fn()
                    spent[name] += clock() - started
        for name, ns in spent.items():
            rates[name].append(ops * 1e9 / ns)
    return rates


async def run_async(
    contenders: dict[str, Callable[[], Awaitable[None]]], ops: int, runs: int
) -> dict[str, list[float]]:
    """The asyncio twin of `run_sync`."""
    for fn in contenders.values():
        for _ in range(50):
            await fn()
    rates: dict[str, list[float]] = {name: [] for name in contenders}
    clock = time.perf_counter_ns
    for run in range(runs):
        orders = _orders(contenders, ops, seed=run)
        spent = dict.fromkeys(contenders, 0)
        with _gc_paused():
            for order in orders:
                for name, fn in order:
                    started = clock()
                    await fn()
                    spent[name] += clock() - started
        for name, ns in spent.items():
            rates[name].append(ops * 1e9 / ns)
    return rates


def table(title: str, rates: dict[str, list[float]], costs: dict[str, Cost] | None = None) -> list[str]:
    """Median rate of each contender, the median of the per-run (paired) ratios, and each cycle's cost."""
    ours = rates[OURS]
    head = "| contender | ops/s (median) | µs/op | resilience ÷ contender (median of paired runs) |"
    rule = "|---|---:|---:|---:|"
    if costs:
        head += " server commands/cycle | server µs/cycle | round trips/cycle |"
        rule += "---:|---:|---:|"
    lines = [f"### {title}", "", head, rule]
    for name, values in rates.items():
        rate = statistics.median(values)
        paired = statistics.median(a / b for a, b in zip(ours, values, strict=True))
        ratio = "—" if name == OURS else f"{paired:.2f}x"
        row = f"| {name} | {rate:,.0f} | {1e6 / rate:,.1f} | {ratio} |"
        if costs:
            cost = costs[name]
            row += f" {cost.commands:.1f} | {cost.server_us:.1f} | {cost.round_trips:.1f} |"
        lines.append(row)
    return [*lines, ""]


def _paired(rates: dict[str, list[float]], name: str) -> float:
    return statistics.median(a / b for a, b in zip(rates[OURS], rates[name], strict=True))


def _profile(cost: Cost) -> str:
    return ", ".join(f"{name} {calls:g}" for name, calls in cost.profile.items() if calls >= 0.05)


async def main_async(server: RedisServer, ops: int, runs: int) -> dict[str, list[float]]:
    client = redis.asyncio.Redis(port=server.port)
    try:
        return await run_async(async_contenders(client), ops, runs)
    finally:
        await client.aclose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--ops", type=int, default=300, help="acquire+release pairs per run and contender")
    parser.add_argument("--runs", type=int, default=25, help="runs per contender (the median is reported)")
    parser.add_argument("--write", type=Path, help="replace the '## Redis lock store' section of this file")
    parser.add_argument("--no-cluster", action="store_true", help="skip the Redis Cluster count")
    options = parser.parse_args()
    _count_sends()

    server = RedisServer()
    server.start()
    try:
        client = redis.Redis(port=server.port)
        try:
            contenders = sync_contenders(client)
            sync_medians = run_sync(contenders, options.ops, options.runs)
            costs = {name: cycle_cost(client, operation) for name, operation in contenders.items()}
        finally:
            client.close()
        async_medians = asyncio.run(main_async(server, options.ops, options.runs))
        version = server.command("INFO", "server").split("redis_version:")[1].split("\r\n")[0]
    finally:
        server.close()
    cluster = None if options.no_cluster else cluster_cost()

    ours, raw = costs[OURS], costs[RAW]
    lines = [
        "## Redis lock store",
        "",
        (
            "Uncontended acquire + release, one connection, local redis-server "
            f"{version} over TCP loopback; median of {options.runs} runs of {options.ops} operations "
            "per contender, the contenders' operations interleaved one by one in a random order, "
            "GC paused (`python benchmarks/redis_lock.py`). Every contender makes a fresh owner id "
            f"per operation. Python {platform.python_version()}, redis-py {redis.__version__}, "
            f"{platform.machine()}, load average {os.getloadavg()[0]:.1f} when it started."
        ),
        "",
        *table("sync", sync_medians, costs),
        *table("asyncio", async_medians),
        (
            "Cost per cycle, each contender run alone: server commands (`INFO commandstats`, those "
            "inside scripts included), the server's time in the commands sent (`SLOWLOG` at "
            f"threshold 0: a script's own commands are part of its time) and round trips counted by the client. resilience: {_profile(ours)}. Raw fenced loop: {_profile(raw)}."
            + (
                f" On a 3-master Redis Cluster (the key on one master): {cluster.commands:.1f} commands, "
                f"{cluster.server_us:.1f} µs ({_profile(cluster)})."
                if cluster
                else ""
            )
        ),
        "",
        (
            f"Targets: >= 0.95x the raw loop and >= 1.0x redis-py's `Lock` (sync: "
            f"{_paired(sync_medians, RAW):.2f}x and {_paired(sync_medians, 'redis-py Lock'):.2f}x); server time "
            f"per cycle close to the raw loop's ({ours.server_us:.1f} µs vs {raw.server_us:.1f} µs)."
        ),
        "",
    ]
    text = "\n".join(lines)
    print(text)
    if options.write:
        write_section(options.write, "## Redis lock store", text)


if __name__ == "__main__":
    main()
