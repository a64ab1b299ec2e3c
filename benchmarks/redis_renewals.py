"""1,000 leases on a 1 s ttl renewed from one process over Redis: pipelined batches against one EVALSHA per renewal.

Not a test. Starts its own redis-server on a free local port (never the user's database) and
holds `--leases` leases (ttl 1 s, renewed every ttl/3, the strategy's default heartbeat) for
`--seconds`, sync (threads) and asyncio, each two ways:

- batched: `RedisLockStore` as shipped, whose `renew_many` sends the renewals due together
  as one pipeline (one round trip, one EVALSHA per lease);
- one by one: the same store with `renew_many` hidden, so the runtime calls `renew` per lease
  (one round trip each), as before `renew_many` existed on Redis.

Each variant runs in a fresh process (one that fell behind leaves no threads, queued work or
connections to slow the next), the variants interleaved, `--runs` rounds; medians. Printed
per variant: leases lost; client round trips per second (pipelines executed plus single
EVALSHAs, counted on the client); renewals the server ran per second (`cmdstat_evalsha`);
`total_commands_processed` per second; client CPU; and the ratios.

    python benchmarks/redis_renewals.py [--leases 1000] [--seconds 10] [--runs 3] [--write docs/performance.md]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import redis
import redis.asyncio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks._harness import write_section
from resilience._lease import LeaseParams, LockOps, acquire_lease, acquire_lease_async, wait_idle
from resilience._time import SYSTEM_TIME
from resilience.stores import RedisLockStore
from tests.redis_support import RedisServer, Roundtrips

TTL = 1.0
PARAMS = LeaseParams(ttl=TTL, renew_interval=TTL / 3)
SECTION = "## Redis: renewing many leases"
VARIANTS = {"batched (renew_many)": True, "one by one (renew)": False}
METRICS = ["lost", "round trips/s", "renewals/s", "server commands/s", "client CPU %"]


class OneByOne:
    """The store's lock surface without `renew_many`: the runtime renews each lease on its own."""

    def __init__(self, store: RedisLockStore) -> None:
        self.store = store
        self.has_sync_client = store.has_sync_client
        self.has_async_client = store.has_async_client

    def acquire(self, key: str, owner: str, ttl: float) -> int | None:
        return self.store.acquire(key, owner, ttl)

    def renew(self, key: str, owner: str, ttl: float) -> bool:
        return self.store.renew(key, owner, ttl)

    def release(self, key: str, owner: str) -> bool:
        return self.store.release(key, owner)

    async def acquire_async(self, key: str, owner: str, ttl: float) -> int | None:
        return await self.store.acquire_async(key, owner, ttl)

    async def renew_async(self, key: str, owner: str, ttl: float) -> bool:
        return await self.store.renew_async(key, owner, ttl)

    async def release_async(self, key: str, owner: str) -> bool:
        return await self.store.release_async(key, owner)


def _server_counts(admin: redis.Redis) -> tuple[int, int]:
    """(EVALSHA calls, total commands processed) so far."""
    evalsha = admin.info("commandstats").get("cmdstat_evalsha", {}).get("calls", 0)
    return int(evalsha), int(admin.info("stats")["total_commands_processed"])


def _measure(port: int, counter: Roundtrips, seconds: float) -> dict[str, float]:
    """Hold for `seconds` (the leases renew meanwhile) and count what went over the wire."""
    admin = redis.Redis(port=port)
    try:
        evalsha, total = _server_counts(admin)
        cpu = time.process_time()
        counter.pipelines.clear()
        counter.singles = 0
        time.sleep(seconds)
        counts = counter.frozen()
        cpu = time.process_time() - cpu
        evalsha_after, total_after = _server_counts(admin)
    finally:
        admin.close()
    return {
        "round trips/s": (len(counts.pipelines) + counts.singles) / seconds,
        "renewals/s": (evalsha_after - evalsha) / seconds,
        "server commands/s": (total_after - total) / seconds,
        "client CPU %": 100 * cpu / seconds,
    }


def run_sync(port: int, leases: int, seconds: float, *, batched: bool, tag: str) -> dict[str, float]:
    client = redis.Redis(port=port)
    try:
        store = RedisLockStore(client)
        ops = LockOps(store if batched else OneByOne(store))
        held = []
        for n in range(leases):
            lease, _ = acquire_lease(
                ops, f"{tag}:{n}", params=PARAMS, schedule=None, time_provider=SYSTEM_TIME, signal=None
            )
            assert lease is not None
            held.append(lease)
        result = _measure(port, Roundtrips(client), seconds)
        result["lost"] = sum(lease.lost for lease in held)
        for lease in held:
            lease.finish()
        wait_idle(30)
        return result
    finally:
        client.close()


def run_async(port: int, leases: int, seconds: float, *, batched: bool, tag: str) -> dict[str, float]:
    async def main() -> dict[str, float]:
        client = redis.asyncio.Redis(port=port)
        try:
            store = RedisLockStore(async_client=client)
            ops = LockOps(store if batched else OneByOne(store))
            held = []
            for n in range(leases):
                lease, _ = await acquire_lease_async(
                    ops, f"{tag}:{n}", params=PARAMS, schedule=None, time_provider=SYSTEM_TIME, signal=None
                )
                assert lease is not None
                held.append(lease)
            # Measured on a helper thread: the loop keeps running the renewals meanwhile.
            result = await asyncio.to_thread(_measure, port, Roundtrips(client), seconds)
            result["lost"] = sum(lease.lost for lease in held)
            for lease in held:
                await lease.finish_async()
            return result
        finally:
            await client.aclose()

    return asyncio.run(main())


def table(title: str, rows: dict[str, list[dict[str, float]]]) -> list[str]:
    medians = {name: {m: statistics.median(run[m] for run in runs) for m in METRICS} for name, runs in rows.items()}
    lines = [f"**{title}**", "", "| | " + " | ".join(METRICS) + " |", "|---|" + "---:|" * len(METRICS)]
    for name, values in medians.items():
        lost = ", ".join(str(int(run["lost"])) for run in rows[name])
        cells = [lost] + [f"{values[m]:,.0f}" for m in METRICS[1:]]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    batched, single = medians["batched (renew_many)"], medians["one by one (renew)"]
    lines += [
        "",
        (
            f"Round trips: {single['round trips/s'] / max(batched['round trips/s'], 1e-9):.0f}x fewer batched "
            f"({batched['round trips/s']:,.0f}/s vs {single['round trips/s']:,.0f}/s) while the server ran "
            f"{batched['renewals/s'] / max(single['renewals/s'], 1e-9):.2f}x the renewals; client CPU "
            f"{batched['client CPU %'] / max(single['client CPU %'], 1e-9):.2f}x."
        ),
        "",
    ]
    return lines


def one(options: argparse.Namespace) -> None:
    """Run the variant `options.one` names in this (fresh) process and print its numbers as JSON."""
    port, flavour, batched, tag = options.one
    run = run_sync if flavour == "sync" else run_async
    print(json.dumps(run(int(port), options.leases, options.seconds, batched=batched == "1", tag=tag)))


def _variant(port: int, options: argparse.Namespace, flavour: str, *, batched: bool, tag: str) -> dict[str, Any]:
    command = [sys.executable, __file__, "--leases", str(options.leases), "--seconds", str(options.seconds)]
    command += ["--one", str(port), flavour, "1" if batched else "0", tag]
    out = subprocess.run(command, check=True, capture_output=True, text=True).stdout
    result: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--leases", type=int, default=1000)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--runs", type=int, default=3, help="rounds of every variant (medians reported)")
    parser.add_argument("--write", type=Path, help=f"replace the '{SECTION}' section of this file")
    parser.add_argument("--one", nargs=4, metavar=("PORT", "FLAVOUR", "BATCHED", "TAG"), help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.one:
        one(options)
        return
    load = os.getloadavg()[0]
    server = RedisServer()
    server.start()
    rows: dict[str, dict[str, list[dict[str, float]]]] = {
        flavour: {name: [] for name in VARIANTS} for flavour in ("sync", "async")
    }
    try:
        for run in range(options.runs):
            for flavour in ("sync", "async"):
                for name, batched in VARIANTS.items():
                    tag = f"bench:{run}:{flavour}:{int(batched)}"
                    rows[flavour][name].append(_variant(server.port, options, flavour, batched=batched, tag=tag))
                    print(f"run {run} {flavour} {name}: {rows[flavour][name][-1]}", flush=True)
        version = server.command("INFO", "server").split("redis_version:")[1].split("\r\n")[0]
    finally:
        server.close()
    after = os.getloadavg()[0]
    lines = [
        SECTION,
        "",
        (
            f"`python benchmarks/redis_renewals.py --leases {options.leases} --seconds {options.seconds:g} "
            f"--runs {options.runs}`: {options.leases} leases on a {TTL:g} s ttl renewed every ttl/3 from one "
            f"process, held {options.seconds:g} s per run, each variant in a fresh process, variants "
            f"interleaved, medians of {options.runs} runs (the lost column lists every run). Python "
            f"{platform.python_version()}, redis-py {redis.__version__}, Redis {version} on localhost, "
            f"{platform.machine()}, {os.cpu_count()} cores shared with other work: load average {load:.1f} "
            f"(1 min) when it started, {after:.1f} when it ended. Round trips are counted on the client "
            "(pipelines executed + single EVALSHAs); renewals and server commands come from `INFO` "
            "(`cmdstat_evalsha` calls; `total_commands_processed`, which also counts the two "
            "`redis.call`s each renew script makes)."
        ),
        "",
        *table("sync (threads)", rows["sync"]),
        *table("asyncio", rows["async"]),
    ]
    text = "\n".join(lines)
    print(text)
    if options.write:
        write_section(options.write, SECTION, text)


if __name__ == "__main__":
    main()
