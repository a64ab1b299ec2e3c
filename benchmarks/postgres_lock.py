"""The PostgreSQL lock store against what a user would write instead, side by side in one run.

Not a test. Starts its own PostgreSQL cluster (initdb/pg_ctl) on a free local port in a temp
directory, never the server on 5432 (`fsync=off`, as the tests: the numbers are the client's and
the server's CPU, not a disk's flush).

1. Uncontended acquire + release of one key, one thread, `--ops` times each:
   - raw psycopg: one connection in autocommit, the store's very two statements (acquire,
     release), prepared — the floor for this work (target: the store at >= 0.9x of it);
   - `PostgresLockStore.acquire` + `.release` (sync), and the `_async` twins against raw async;
   - the `lock()` primitive's `acquire` + `handle.release()` over the store;
   - `pg_advisory_lock` + `pg_advisory_unlock` on one session (no ttl, no fencing token: the
     lock dies with the session, and a stalled holder cannot be fenced off).
2. Contention: 8 threads loop on ONE key (wait for it, hold ~1 ms, release, think ~5 ms):
   - the lock strategy with `wait=` (woken by LISTEN/NOTIFY);
   - `pg_advisory_lock` (the server's lock manager queues the waiters, FIFO).
   Reported: sections per second, median hand-off gap (one body ends -> the next starts;
   target <= 2 ms), p99 wait, per-worker spread (most / fewest sections; target <= 1.2).

    python benchmarks/postgres_lock.py [--ops 1000] [--rounds 7] [--seconds 4]
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import platform
import statistics
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from resilience import ResiliencePipelineBuilder
from resilience.primitives import lock
from resilience.stores import PostgresLockStore
from resilience.stores._postgres_sql import LockSql
from tests.postgres_support import PostgresServer

WORKERS = 8
HOLD = 0.001
THINK = 0.005
TTL = 30.0


# -- 1. uncontended -------------------------------------------------------------------------------


def raw_sync(dsn: str, ops: int) -> float:
    sql = LockSql("resilience_locks")
    with psycopg.connect(dsn, autocommit=True, prepare_threshold=0) as conn:
        key, owner = f"raw:{uuid.uuid4().hex}", uuid.uuid4().hex
        params = {"key": key, "owner": owner, "ttl": 30_000}
        started = time.perf_counter()
        for _ in range(ops):
            row = conn.execute(sql.acquire, params).fetchone()
            assert row is not None
            assert row[0] is not None
            assert conn.execute(sql.release, (key, owner)).rowcount == 1
        return ops / (time.perf_counter() - started)


async def raw_async(dsn: str, ops: int) -> float:
    sql = LockSql("resilience_locks")
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True, prepare_threshold=0) as conn:
        key, owner = f"raw:{uuid.uuid4().hex}", uuid.uuid4().hex
        params = {"key": key, "owner": owner, "ttl": 30_000}
        started = time.perf_counter()
        for _ in range(ops):
            cursor = await conn.execute(sql.acquire, params)
            row = await cursor.fetchone()
            assert row is not None
            assert row[0] is not None
            assert (await conn.execute(sql.release, (key, owner))).rowcount == 1
        return ops / (time.perf_counter() - started)


def store_sync(store: PostgresLockStore, ops: int) -> float:
    key, owner = f"store:{uuid.uuid4().hex}", uuid.uuid4().hex
    started = time.perf_counter()
    for _ in range(ops):
        assert store.acquire(key, owner, TTL) is not None
        assert store.release(key, owner)
    return ops / (time.perf_counter() - started)


async def store_async(store: PostgresLockStore, ops: int) -> float:
    key, owner = f"store:{uuid.uuid4().hex}", uuid.uuid4().hex
    started = time.perf_counter()
    for _ in range(ops):
        assert await store.acquire_async(key, owner, TTL) is not None
        assert await store.release_async(key, owner)
    return ops / (time.perf_counter() - started)


def primitive_sync(store: PostgresLockStore, ops: int) -> float:
    locks = lock(store, ttl=TTL)
    key = f"prim:{uuid.uuid4().hex}"
    started = time.perf_counter()
    for _ in range(ops):
        handle = locks.acquire(key)
        assert handle is not None
        assert handle.release()
    return ops / (time.perf_counter() - started)


def advisory_sync(dsn: str, ops: int) -> float:
    with psycopg.connect(dsn, autocommit=True, prepare_threshold=0) as conn:
        started = time.perf_counter()
        for _ in range(ops):
            conn.execute("SELECT pg_advisory_lock(hashtextextended(%s, 0))", ("adv",))
            conn.execute("SELECT pg_advisory_unlock(hashtextextended(%s, 0))", ("adv",))
        return ops / (time.perf_counter() - started)


# -- 2. contention ---------------------------------------------------------------------------------


class Record:
    def __init__(self) -> None:
        self.sections: list[tuple[float, float, int]] = []
        self.waits: list[float] = []
        self.guard = threading.Lock()
        self.inside = 0
        self.overlaps = 0

    def body(self, worker: int, asked: float) -> None:
        start = time.perf_counter()
        with self.guard:
            self.inside += 1
            self.overlaps += self.inside > 1
            self.waits.append(start - asked)
        time.sleep(HOLD)
        end = time.perf_counter()
        with self.guard:
            self.inside -= 1
            self.sections.append((start, end, worker))


def contend(seconds: float, section: Any) -> dict[str, float]:
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
    barrier.wait()
    started = time.perf_counter()
    time.sleep(seconds)
    stop.set()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - started
    sections = sorted(record.sections)
    gaps = [b[0] - a[1] for a, b in itertools.pairwise(sections) if b[0] >= a[1]]
    counts = [sum(1 for s in sections if s[2] == w) for w in range(WORKERS)]
    waits = sorted(record.waits)
    return {
        "per_second": len(sections) / elapsed,
        "gap_p50_ms": statistics.median(gaps) * 1000,
        "gap_p90_ms": gaps and sorted(gaps)[int(0.9 * (len(gaps) - 1))] * 1000,
        "p99_wait_ms": waits[int(0.99 * (len(waits) - 1))] * 1000,
        "spread": max(counts) / max(1, min(counts)),
        "overlaps": record.overlaps,
    }


def strategy_section(store: PostgresLockStore) -> Any:
    key = f"contended:{uuid.uuid4().hex}"
    pipeline = ResiliencePipelineBuilder().add_lock(key, ttl=TTL, wait=30, store=store).build()

    def section(worker: int, record: Record, asked: float) -> None:
        pipeline.execute(record.body, worker, asked)

    return section


def advisory_section(dsn: str) -> Any:
    connections = [psycopg.connect(dsn, autocommit=True) for _ in range(WORKERS)]
    key = f"contended:{uuid.uuid4().hex}"

    def section(worker: int, record: Record, asked: float) -> None:
        conn = connections[worker]
        conn.execute("SELECT pg_advisory_lock(hashtextextended(%s, 0))", (key,))
        try:
            record.body(worker, asked)
        finally:
            conn.execute("SELECT pg_advisory_unlock(hashtextextended(%s, 0))", (key,))

    return section


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--ops", type=int, default=1000)
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()

    server = PostgresServer()
    server.start()
    try:
        dsn = server.dsn
        with PostgresLockStore(dsn) as setup:
            setup.create_schema()
        print(f"# PostgreSQL lock store — Python {platform.python_version()}, psycopg {psycopg.__version__}")
        with psycopg.connect(dsn) as conn:
            print(f"# server: {conn.execute('SHOW server_version').fetchone()[0]} (local, fsync=off)")  # type: ignore[index]

        store = PostgresLockStore(dsn)
        ops, rounds = args.ops, args.rounds
        store_sync(store, 200)  # warm the pool and psycopg's prepared statements
        # Rounds interleave the contenders, and each keeps its best round: on a shared, loaded
        # machine a slow spell then hurts every contender alike instead of one of them.
        best: dict[str, float] = {}
        for _ in range(rounds):
            for name, run in [
                ("raw", lambda: raw_sync(dsn, ops)),
                ("ours", lambda: store_sync(store, ops)),
                ("prim", lambda: primitive_sync(store, ops)),
                ("adv", lambda: advisory_sync(dsn, ops)),
            ]:
                best[name] = max(best.get(name, 0.0), run())
        raw, ours, prim, adv = best["raw"], best["ours"], best["prim"], best["adv"]

        async def both_async() -> tuple[float, float]:
            await store_async(store, 200)
            raw_a = ours_a = 0.0
            for _ in range(rounds):
                raw_a = max(raw_a, await raw_async(dsn, ops))
                ours_a = max(ours_a, await store_async(store, ops))
            await store.aclose()
            return raw_a, ours_a

        raw_a, ours_a = asyncio.run(both_async())
        print("\n## Uncontended acquire + release (one key, one caller), best of", rounds, "x", ops)
        print(f"{'contender':44} {'pairs/s':>9} {'us/pair':>8} {'vs raw':>7}")
        for name, rate, base in [
            ("raw psycopg, same two statements (sync)", raw, raw),
            ("PostgresLockStore acquire+release (sync)", ours, raw),
            ("lock(store).acquire + handle.release (sync)", prim, raw),
            ("pg_advisory_lock + unlock (sync)", adv, raw),
            ("raw psycopg, same two statements (async)", raw_a, raw_a),
            ("PostgresLockStore *_async", ours_a, raw_a),
        ]:
            print(f"{name:44} {rate:9.0f} {1e6 / rate:8.1f} {rate / base:6.2f}x")

        store = PostgresLockStore(dsn)
        print(
            f"\n## Contention: {WORKERS} threads, one key, hold {HOLD * 1000:.0f} ms, think {THINK * 1000:.0f} ms, {args.seconds} s each"
        )
        print(
            f"{'contender':44} {'sect/s':>7} {'gap p50':>8} {'gap p90':>8} {'p99 wait':>9} {'spread':>7} {'overlap':>8}"
        )
        for name, section in [
            ("lock strategy wait= (LISTEN/NOTIFY)", strategy_section(store)),
            ("pg_advisory_lock (server queue)", advisory_section(dsn)),
        ]:
            r = contend(args.seconds, section)
            print(
                f"{name:44} {r['per_second']:7.0f} {r['gap_p50_ms']:6.2f}ms {r['gap_p90_ms']:6.2f}ms"
                f" {r['p99_wait_ms']:7.1f}ms {r['spread']:7.2f} {r['overlaps']:8d}"
            )
        store.close()
    finally:
        server.close()


if __name__ == "__main__":
    main()
