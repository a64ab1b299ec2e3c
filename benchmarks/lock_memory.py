"""Lock strategy on the memory store: overhead, and many leases held at once (not a test).

    python benchmarks/lock_memory.py [--leases 10000] [--seconds 5] [--ttl 3]

1. Uncontended `execute` through `add_lock` vs the same pipeline without the lock (sync, async).
2. N leases held at once, renewing on a short ttl, sync (engine leases, as a primitive's handles
   or N concurrent executions hold them) then asyncio (N tasks executing through the pipeline):
   extra threads, renewals per second achieved (vs needed), leases lost, memory per held lease.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import threading
import time
import timeit
import tracemalloc

from resilience import ResiliencePipelineBuilder
from resilience._lease import LeaseParams, LockOps, acquire_lease, wait_idle
from resilience.stores import MemoryLockStore


class CountingStore(MemoryLockStore):
    def __init__(self) -> None:
        super().__init__()
        self.renewals = 0
        self.refused = 0

    def renew(self, key: str, owner: str, ttl: float) -> bool:
        self.renewals += 1
        ok = super().renew(key, owner, ttl)
        self.refused += not ok
        return ok


def _best_ns(fn, number: int) -> float:
    runs = timeit.repeat(fn, number=number, repeat=7)
    return min(runs) / number * 1e9


def overhead(rounds: int) -> dict[str, float]:
    store = MemoryLockStore()
    plain = ResiliencePipelineBuilder().build()
    locked = ResiliencePipelineBuilder().add_lock("bench", store=store).build()

    def body() -> int:
        return 1

    results = {
        "sync plain": _best_ns(lambda: plain.execute(body), rounds),
        "sync lock": _best_ns(lambda: locked.execute(body), rounds),
    }

    async def abody() -> int:
        return 1

    async def measure(pipeline) -> float:
        best = float("inf")
        for _ in range(7):
            start = time.perf_counter()
            for _ in range(rounds):
                await pipeline.execute_async(abody)
            best = min(best, (time.perf_counter() - start) / rounds * 1e9)
        return best

    async def both() -> None:
        results["async plain"] = await measure(plain)
        results["async lock"] = await measure(locked)

    asyncio.run(both())
    return results


def _threads() -> int:
    return threading.active_count()


def held_sync(leases: int, seconds: float, ttl: float) -> dict[str, float]:
    store = CountingStore()
    ops = LockOps(store)
    params = LeaseParams(ttl=ttl, renew_interval=ttl / 3)
    before_threads = _threads()

    def hold(prefix: str) -> list:
        held = []
        for n in range(leases):
            lease, _ = acquire_lease(
                ops, f"{prefix}{n}", params=params, schedule=None, time_provider=store.time_provider, signal=None
            )
            assert lease is not None
            held.append(lease)
        return held

    gc.collect()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    measured = hold("m")
    per_lease = (tracemalloc.get_traced_memory()[0] - base) / leases
    tracemalloc.stop()
    for lease in measured:
        lease.finish()
    del measured
    held = hold("k")
    start_renewals = store.renewals
    start = time.perf_counter()
    time.sleep(seconds)
    elapsed = time.perf_counter() - start
    renewals = store.renewals - start_renewals
    extra_threads = _threads() - before_threads
    lost = sum(lease.lost for lease in held)
    for lease in held:
        lease.finish()
    wait_idle(30)
    return {
        "leases": leases,
        "extra threads": extra_threads,
        "renewals/s": renewals / elapsed,
        "needed/s": leases / (ttl / 3),
        "lost": lost,
        "bytes/lease": per_lease,
        "left in store": len(store),
    }


def held_async(leases: int, seconds: float, ttl: float) -> dict[str, float]:
    store = CountingStore()
    pipeline = ResiliencePipelineBuilder().add_lock(lambda ctx: f"a{ctx.operation_key}", ttl=ttl, store=store).build()
    lost = 0
    before_threads = _threads()

    async def main() -> dict[str, float]:
        nonlocal lost
        from resilience import get_context, use_context

        go = asyncio.Event()
        ready = 0

        async def body() -> None:
            nonlocal ready, lost
            ready += 1
            await go.wait()
            context = get_context()
            lost += context is not None and context.signal.aborted

        async def one(n: str) -> None:
            with use_context(operation_key=n):
                await pipeline.execute_async(body)

        async def hold(prefix: str) -> list:
            nonlocal ready
            ready = 0
            tasks = [asyncio.ensure_future(one(f"{prefix}{n}")) for n in range(leases)]
            while ready < leases:  # noqa: ASYNC110 - polling a counter is the simplest here
                await asyncio.sleep(0.01)
            return tasks

        gc.collect()
        tracemalloc.start()
        base = tracemalloc.get_traced_memory()[0]
        tasks = await hold("m")
        per_lease = (tracemalloc.get_traced_memory()[0] - base) / leases
        tracemalloc.stop()
        go.set()
        await asyncio.gather(*tasks)
        go.clear()
        lost = 0
        tasks = await hold("k")
        start_renewals = store.renewals
        start = time.perf_counter()
        await asyncio.sleep(seconds)
        elapsed = time.perf_counter() - start
        renewals = store.renewals - start_renewals
        extra_threads = _threads() - before_threads
        go.set()
        await asyncio.gather(*tasks)
        return {
            "leases": leases,
            "extra threads": extra_threads,
            "renewals/s": renewals / elapsed,
            "needed/s": leases / (ttl / 3),
            "lost": lost,
            "bytes/lease (incl. task)": per_lease,
            "left in store": len(store),
        }

    return asyncio.run(main())


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--leases", type=int, default=10_000)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--ttl", type=float, default=3.0)
    parser.add_argument("--rounds", type=int, default=20_000)
    args = parser.parse_args()

    print("## Uncontended execute (best of 7, ns per call)")
    results = overhead(args.rounds)
    for name, ns in results.items():
        print(f"  {name:<12} {ns:9.0f} ns")
    print(f"  sync ratio  {results['sync lock'] / results['sync plain']:.2f}x")
    print(f"  async ratio {results['async lock'] / results['async plain']:.2f}x")

    for label, run in (("sync", held_sync), ("asyncio", held_async)):
        print(f"## {args.leases} leases held at once, {label}, ttl={args.ttl}s (renew every {args.ttl / 3:.2f}s)")
        for name, value in run(args.leases, args.seconds, args.ttl).items():
            print(f"  {name:<24} {value:,.1f}" if isinstance(value, float) else f"  {name:<24} {value}")


if __name__ == "__main__":
    main()
