"""The PostgreSQL lock store against what a user would write instead, side by side in one run.

Not a test. Starts its own PostgreSQL cluster (initdb/pg_ctl) on a free local port in a temp
directory, never the server on 5432 (`fsync=off`, as the tests: the numbers are the client's and
the server's CPU, not a disk's flush).

1. Uncontended acquire + release of one key, one thread, `--ops` times each:
   - raw psycopg: one connection in autocommit, the store's very two statements (acquire,
     release), prepared — the floor for this work (target: the store at >= 0.9x of it);
   - the same two statements each on a connection checked out of a `psycopg_pool` and back
     (what the store did before it kept one connection between statements);
   - `PostgresLockStore.acquire` + `.release` (sync), and the `_async` twins against raw async;
   - the `lock()` primitive's `acquire` + `handle.release()` over the store;
   - `pg_advisory_lock` + `pg_advisory_unlock` on one session (no ttl, no fencing token: the
     lock dies with the session, and a stalled holder cannot be fenced off).
2. Contention: 8 threads loop on ONE key (wait for it, hold ~1 ms, release, think ~5 ms):
   - the lock strategy with `wait=` (woken by LISTEN/NOTIFY);
   - `pg_advisory_lock` (the server's lock manager queues the waiters, FIFO).
   Reported: sections per second, median hand-off gap (one body ends -> the next starts;
   target <= 2 ms), p99 wait, per-worker spread (most / fewest sections; target <= 1.2).

    python benchmarks/postgres_lock.py [--ops 5000] [--seconds 4]
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
import psycopg_pool

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


# Each contender is one acquire + release. The contenders run in turns of CHUNK pairs, round
# robin, and each one's time is summed over its turns: on a shared, loaded machine a slow spell
# then hurts every contender alike instead of whichever ran during it.
CHUNK = 50
RAW_SYNC = "raw psycopg, same two statements (sync)"
RAW_ASYNC = "raw psycopg, same two statements (async)"


def sync_contenders(dsn: str, store: PostgresLockStore) -> dict[str, Any]:
    sql = LockSql("resilience_locks")
    raw = psycopg.connect(dsn, autocommit=True, prepare_threshold=0)
    advisory = psycopg.connect(dsn, autocommit=True, prepare_threshold=0)
    raw_key, raw_owner = f"raw:{uuid.uuid4().hex}", uuid.uuid4().hex
    raw_params = {"key": raw_key, "owner": raw_owner, "ttl": 30_000, "shared": False, "join": False}
    release_params = {"key": raw_key, "owner": raw_owner}
    key, owner = f"store:{uuid.uuid4().hex}", uuid.uuid4().hex
    locks = lock(store, ttl=TTL)
    prim_key = f"prim:{uuid.uuid4().hex}"

    def raw_pair() -> None:
        row = raw.execute(sql.acquire, raw_params).fetchone()
        assert row is not None
        assert row[0] > 0
        assert raw.execute(sql.release, release_params).fetchone() == (1,)

    pool = psycopg_pool.ConnectionPool(dsn, min_size=1, max_size=8, kwargs={"autocommit": True}, open=True)
    pool_key = f"pool:{uuid.uuid4().hex}"
    pool_params = {"key": pool_key, "owner": raw_owner, "ttl": 30_000, "shared": False, "join": False}

    def pool_pair() -> None:
        # What the store did before it kept a connection: a pool checkout per statement.
        conn = pool.getconn()
        try:
            row = conn.execute(sql.acquire, pool_params).fetchone()
        finally:
            pool.putconn(conn)
        assert row is not None
        assert row[0] > 0
        conn = pool.getconn()
        try:
            assert conn.execute(sql.release, {"key": pool_key, "owner": raw_owner}).fetchone() == (1,)
        finally:
            pool.putconn(conn)

    def store_pair() -> None:
        assert store.acquire(key, owner, TTL) is not None
        assert store.release(key, owner)

    def primitive_pair() -> None:
        handle = locks.acquire(prim_key)
        assert handle is not None
        assert handle.release()

    def advisory_pair() -> None:
        advisory.execute("SELECT pg_advisory_lock(hashtextextended(%s, 0))", ("adv",))
        advisory.execute("SELECT pg_advisory_unlock(hashtextextended(%s, 0))", ("adv",))

    return {
        RAW_SYNC: raw_pair,
        "same two statements, pool checkout each (sync)": pool_pair,
        "PostgresLockStore acquire+release (sync)": store_pair,
        "lock(store).acquire + handle.release (sync)": primitive_pair,
        "pg_advisory_lock + unlock (sync)": advisory_pair,
    }


def run_turns(contenders: dict[str, Any], ops: int) -> dict[str, float]:
    turns = max(1, ops // CHUNK)
    spent = dict.fromkeys(contenders, 0.0)
    for _ in range(turns):
        for name, pair in contenders.items():
            started = time.perf_counter()
            for _ in range(CHUNK):
                pair()
            spent[name] += time.perf_counter() - started
    return {name: turns * CHUNK / seconds for name, seconds in spent.items()}


async def run_turns_async(dsn: str, store: PostgresLockStore, ops: int) -> dict[str, float]:
    sql = LockSql("resilience_locks")
    raw = await psycopg.AsyncConnection.connect(dsn, autocommit=True, prepare_threshold=0)
    raw_key, raw_owner = f"raw:{uuid.uuid4().hex}", uuid.uuid4().hex
    raw_params = {"key": raw_key, "owner": raw_owner, "ttl": 30_000, "shared": False, "join": False}
    release_params = {"key": raw_key, "owner": raw_owner}
    key, owner = f"store:{uuid.uuid4().hex}", uuid.uuid4().hex

    async def raw_pair() -> None:
        row = await (await raw.execute(sql.acquire, raw_params)).fetchone()
        assert row is not None
        assert row[0] > 0
        assert await (await raw.execute(sql.release, release_params)).fetchone() == (1,)

    async def store_pair() -> None:
        assert await store.acquire_async(key, owner, TTL) is not None
        assert await store.release_async(key, owner)

    contenders = {RAW_ASYNC: raw_pair, "PostgresLockStore *_async": store_pair}
    for pair in contenders.values():  # warm up: the pool, psycopg's prepared statements
        for _ in range(CHUNK):
            await pair()
    turns = max(1, ops // CHUNK)
    spent = dict.fromkeys(contenders, 0.0)
    for _ in range(turns):
        for name, pair in contenders.items():
            started = time.perf_counter()
            for _ in range(CHUNK):
                await pair()
            spent[name] += time.perf_counter() - started
    await raw.close()
    await store.aclose()
    return {name: turns * CHUNK / seconds for name, seconds in spent.items()}


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
    parser.add_argument("--ops", type=int, default=5000)
    parser.add_argument("--seconds", type=float, default=4.0)
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
        contenders = sync_contenders(dsn, store)
        run_turns(contenders, CHUNK)  # warm up: the pool, psycopg's prepared statements
        rates = run_turns(contenders, args.ops)
        rates.update(asyncio.run(run_turns_async(dsn, store, args.ops)))
        print(f"\n## Uncontended acquire + release (one key, one caller), {args.ops} pairs each, in turns of {CHUNK}")
        print(f"{'contender':44} {'pairs/s':>9} {'us/pair':>8} {'vs raw':>7}")
        for name, rate in rates.items():
            base = rates[RAW_ASYNC if "async" in name else RAW_SYNC]
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
