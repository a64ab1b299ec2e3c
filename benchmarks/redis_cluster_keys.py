"""Many keys on Redis Cluster: lock throughput with 1 master against 3 masters.

Not a test. Starts its own Cluster nodes on free local ports (never the user's database):
a one-master Cluster (all 16,384 slots on one node) and the suite's three-master Cluster.
Each of `--processes` processes runs `--threads` threads that acquire and release locks on
`--keys` keys chosen at random (`RedisLockStore` over `redis.cluster.RedisCluster`, a fresh
owner per operation, uncontended most of the time) for `--seconds`; the acquire+release pairs
per second of all processes are summed. Rounds alternate between the two deployments and the
median is reported.

    python benchmarks/redis_cluster_keys.py [--keys 64] [--processes 4] [--threads 2] [--seconds 3] [--rounds 3]
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import random
import statistics
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import redis.cluster

_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]
sys.path.insert(0, str(_HERE.parent / "tests"))
from redis_support import RedisCluster, RedisServer

from resilience.stores import RedisLockStore


def _one_master() -> RedisServer:
    node = RedisServer(cluster=True)
    node.start()
    node.command("CLUSTER", "ADDSLOTSRANGE", "0", "16383")
    deadline = time.monotonic() + 30
    while "cluster_state:ok" not in node.command("CLUSTER", "INFO"):
        if time.monotonic() > deadline:
            msg = "the one-master Cluster did not become ok"
            raise RuntimeError(msg)
        time.sleep(0.05)
    return node


def _worker(port: int, job: tuple[int, int, float, Any], out: multiprocessing.Queue) -> None:
    keys, threads, seconds, go = job
    client = redis.cluster.RedisCluster(host="127.0.0.1", port=port)
    store = RedisLockStore(client)
    names = [f"bench:many:{i}" for i in range(keys)]
    for name in names:  # scripts cached on every node, connections open
        owner = uuid.uuid4().hex
        if store.acquire(name, owner, 10):
            store.release(name, owner)
    counts = [0] * threads
    out.put("ready")
    go.wait()
    start_at = time.monotonic()

    def loop(index: int) -> None:
        rng = random.Random(index)
        end = start_at + seconds
        done = 0
        while time.monotonic() < end:
            name = rng.choice(names)
            owner = uuid.uuid4().hex
            if store.acquire(name, owner, 10) is not None:
                store.release(name, owner)
                done += 1
        counts[index] = done

    workers = [threading.Thread(target=loop, args=(i,)) for i in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    store.close()
    client.close()
    out.put(sum(counts))


def measure(port: int, options: argparse.Namespace) -> float:
    context = multiprocessing.get_context("spawn")
    out: multiprocessing.Queue = context.Queue()
    go = context.Event()  # set once every process is connected and warmed up
    processes = [
        context.Process(target=_worker, args=(port, (options.keys, options.threads, options.seconds, go), out))
        for _ in range(options.processes)
    ]
    for process in processes:
        process.start()
    for _ in processes:
        assert out.get(timeout=120) == "ready"
    go.set()
    total = sum(out.get(timeout=120) for _ in processes)
    for process in processes:
        process.join()
    return total / options.seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--keys", type=int, default=64)
    parser.add_argument("--processes", type=int, default=4)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--rounds", type=int, default=3)
    options = parser.parse_args()
    one = _one_master()
    three = RedisCluster(masters=3)
    three.start()
    rates: dict[str, list[float]] = {"1 master": [], "3 masters": []}
    try:
        for _ in range(options.rounds):
            rates["1 master"].append(measure(one.port, options))
            rates["3 masters"].append(measure(three.port, options))
    finally:
        one.close()
        three.close()
    single = statistics.median(rates["1 master"])
    triple = statistics.median(rates["3 masters"])
    print(
        f"{options.keys} keys, {options.processes} processes x {options.threads} threads, "
        f"{options.seconds:g} s per round, median of {options.rounds} alternating rounds, "
        f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}"
    )
    print("| deployment | acquire+release/s | rounds |")
    print("|---|---:|---|")
    for name, values in rates.items():
        print(f"| {name} | {statistics.median(values):,.0f} | {', '.join(f'{v:,.0f}' for v in values)} |")
    print(f"3 masters / 1 master: {triple / single:.2f}x (target >= 2x)")


if __name__ == "__main__":
    main()
