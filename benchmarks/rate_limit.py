"""Rate limiter decisions side by side: in process and over Redis, against `limits` and `pyrate-limiter`.

Not a test. Prints Markdown tables of medians over interleaved rounds (numbers go into
docs/performance.md). Targets (issue #16): a local token-bucket decision <= 1.0 us; the rate
limiter strategy's success path <= 1.5 us over the bare pipeline; faster than `limits`
(memory, moving window) and `pyrate-limiter` (in-memory bucket) per decision; a Redis decision
>= 0.95x a raw one-EVALSHA loop and faster than `limits`' Redis moving window and
`pyrate-limiter`'s Redis bucket.

Every contender limits 1,000 per second per key; the granted path rotates over 10,000 keys
(each key sees far fewer than 1,000 calls a second, so every call is granted and no log grows
beyond what a real key at that rate holds); the refused path hammers one key over its limit.
`pyrate-limiter`'s buckets are not partitioned by name, so it gets one bucket of the summed
limit. Starts its own redis-server on a free port (never the user's database).

    python benchmarks/rate_limit.py [--number 20000] [--rounds 7] [--redis-number 2000]
"""

from __future__ import annotations

import argparse
import itertools
import platform
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parent.parent / "tests"))

from _harness import compare_sync, report
from redis_support import RedisServer

from resilience import PipelineBuilder, ResiliencePipelineBuilder
from resilience.limiters import MemoryRateLimitStore, RedisRateLimitStore
from resilience.limiters._redis_scripts import TOKEN_BUCKET

LIMIT = 1000
KEYS = [f"tenant:{i}" for i in range(10_000)]


def _limits_memory() -> dict[str, Any]:
    try:
        from limits import RateLimitItemPerSecond, storage, strategies
    except ImportError:
        return {}
    moving = strategies.MovingWindowRateLimiter(storage.MemoryStorage())
    item = RateLimitItemPerSecond(LIMIT)
    keys = itertools.cycle(KEYS)
    refused = strategies.MovingWindowRateLimiter(storage.MemoryStorage())
    hour = RateLimitItemPerSecond(10, 3600)
    return {
        "granted": {"`limits` memory, moving window": lambda: moving.hit(item, next(keys))},
        "refused": {"`limits` memory, moving window": lambda: refused.hit(hour, "hot")},
    }


def _pyrate_memory() -> dict[str, Any]:
    try:
        from pyrate_limiter import Duration, InMemoryBucket, Limiter, Rate
    except ImportError:
        return {}
    granted = Limiter(InMemoryBucket([Rate(LIMIT * len(KEYS), Duration.SECOND)]))
    refused = Limiter(InMemoryBucket([Rate(10, Duration.HOUR)]))
    keys = itertools.cycle(KEYS)
    return {
        "granted": {"`pyrate-limiter` InMemoryBucket": lambda: granted.try_acquire(next(keys), blocking=False)},
        "refused": {"`pyrate-limiter` InMemoryBucket": lambda: refused.try_acquire("hot", blocking=False)},
    }


def local(number: int, rounds: int) -> None:
    store = MemoryRateLimitStore()
    decide = store._decider(LIMIT, 1.0, None, "token_bucket")
    keys = itertools.cycle(KEYS)
    granted: dict[str, Any] = {
        "`resilience` MemoryRateLimitStore.take, token bucket": lambda: store.take(next(keys), LIMIT, 1.0),
        "`resilience` strategy's in-process decision, token bucket": lambda: decide(next(keys)),
        "`resilience` MemoryRateLimitStore.take, sliding window": lambda: store.take(
            next(keys), LIMIT, 1.0, None, "sliding_window"
        ),
        "`resilience` MemoryRateLimitStore.take, fixed window": lambda: store.take(
            next(keys), LIMIT, 1.0, None, "fixed_window"
        ),
    }
    hot = MemoryRateLimitStore()
    refused: dict[str, Any] = {
        "`resilience` MemoryRateLimitStore.take, token bucket": lambda: hot.take("hot", 10, 3600.0),
        "`resilience` MemoryRateLimitStore.take, sliding window": lambda: hot.take(
            "hot", 10, 3600.0, None, "sliding_window"
        ),
    }
    for peers in (_limits_memory(), _pyrate_memory()):
        granted.update(peers.get("granted", {}))
        refused.update(peers.get("refused", {}))
    results = compare_sync(granted, number=number, rounds=rounds)
    print(report("In-process decision, granted (10,000 keys, 1,000/s each)", results, baseline=results[0].name))
    print()
    results = compare_sync(refused, number=number, rounds=rounds)
    print(report("In-process decision, refused (one key over its limit)", results, baseline=results[0].name))
    print()


def work(x: int) -> int:
    return x + 1


class PassThrough:
    """A strategy that only calls on: what one strategy costs the pipeline before doing anything."""

    def execute(self, callback, context):
        return callback(context)

    async def execute_async(self, callback, context):
        return await callback(context)


def strategy(number: int, rounds: int) -> None:
    bare = PipelineBuilder().build()
    limited = ResiliencePipelineBuilder().add_rate_limiter(1_000_000_000).build()
    keyed_store = MemoryRateLimitStore()
    keys = itertools.cycle(KEYS)
    floor = PipelineBuilder().add(PassThrough()).build()
    results = compare_sync(
        {
            "bare pipeline `execute(work, 1)`": lambda: bare.execute(work, 1),
            "with `add_rate_limiter(1e9)`": lambda: limited.execute(work, 1),
            "with a pass-through strategy (the floor of any strategy)": lambda: floor.execute(work, 1),
            "bare pipeline + `MemoryRateLimitStore.take` by hand": lambda: (
                keyed_store.take(next(keys), LIMIT, 1.0),
                bare.execute(work, 1),
            ),
        },
        number=number,
        rounds=rounds,
    )
    print(report("Rate limiter strategy, success path", results, baseline=results[0].name))
    added = (results[1].median - results[0].median) * 1e9
    floor_added = (results[2].median - results[0].median) * 1e9
    print(f"\nstrategy overhead over the bare pipeline: {added:,.0f} ns ({floor_added:,.0f} ns of it any strategy's)\n")


def _limits_redis(url: str) -> dict[str, Any]:
    try:
        from limits import RateLimitItemPerSecond, storage, strategies
    except ImportError:
        return {}
    moving = strategies.MovingWindowRateLimiter(storage.RedisStorage(url))
    item = RateLimitItemPerSecond(LIMIT)
    keys = itertools.cycle(KEYS)
    return {"`limits` Redis, moving window": lambda: moving.hit(item, next(keys))}


def _pyrate_redis(client: Any) -> dict[str, Any]:
    try:
        from pyrate_limiter import Duration, Limiter, Rate, RedisBucket
    except ImportError:
        return {}
    bucket = RedisBucket.init([Rate(LIMIT * len(KEYS), Duration.SECOND)], client, "pyrate-bench")
    limiter = Limiter(bucket)
    keys = itertools.cycle(KEYS)
    return {"`pyrate-limiter` RedisBucket": lambda: limiter.try_acquire(next(keys), blocking=False)}


def over_redis(number: int, rounds: int) -> None:
    import redis

    server = RedisServer()
    server.start()
    try:
        client = redis.Redis(port=server.port)
        store = RedisRateLimitStore(client)
        keys = itertools.cycle(KEYS)
        store.take("warm", LIMIT, 1.0)
        interval = 1_000_000 / LIMIT

        def raw() -> object:
            return client.evalsha(TOKEN_BUCKET.sha, 1, f"ratelimit:token_bucket:{next(keys)}", interval, LIMIT, 1)

        candidates: dict[str, Any] = {
            "raw redis-py EVALSHA loop (same script)": raw,
            "`resilience` RedisRateLimitStore.take, token bucket": lambda: store.take(next(keys), LIMIT, 1.0),
            "`resilience` RedisRateLimitStore.take, sliding window": lambda: store.take(
                next(keys), LIMIT, 1.0, None, "sliding_window"
            ),
            "`resilience` RedisRateLimitStore.take, fixed window": lambda: store.take(
                next(keys), LIMIT, 1.0, None, "fixed_window"
            ),
        }
        candidates.update(_limits_redis(server.url))
        candidates.update(_pyrate_redis(client))
        results = compare_sync(candidates, number=number, rounds=rounds)
        print(report("Redis decision, granted (one connection, 10,000 keys)", results, baseline=results[0].name))
        print(
            f"\nRedisRateLimitStore token bucket vs raw loop: {results[0].median / results[1].median:.3f}x throughput"
        )
        client.close()
    finally:
        server.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--only", choices=["local", "strategy", "redis"], default=None)
    parser.add_argument("--number", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--redis-number", type=int, default=2_000)
    args = parser.parse_args()
    print(f"Python {platform.python_version()} on {platform.machine()}, {args.rounds} rounds\n")
    if args.only in {None, "local"}:
        local(args.number, args.rounds)
    if args.only in {None, "strategy"}:
        strategy(args.number, args.rounds)
    if args.only in {None, "redis"}:
        over_redis(args.redis_number, args.rounds)


if __name__ == "__main__":
    main()
