"""Shared circuit state: the closed-state success path and the Redis traffic it costs.

Not a test. Starts its own redis-server on a free local port (never the user's database), then:

1. times the closed-state success path (`pipeline.execute(noop)`) side by side, interleaved:
   the local circuit, the same circuit shared through `RedisCircuitStateStore`, and pybreaker
   with its in-memory state and with its `CircuitRedisStorage` (target: shared <= 1.2x local);
2. counts the commands Redis executes (`INFO commandstats`, every command including those a
   script calls) per 1,000 successful calls at 10,000 calls/s paced, `sync_interval=0.1`
   (target ≤ 20), and the same for pybreaker's `CircuitRedisStorage` (unpaced: it cannot
   keep 10,000 calls/s);
3. measures how long an opening made in one process takes to reject calls in another
   (`sync_interval` + one round trip expected), over several openings.

    python benchmarks/circuit_fleet.py [--number 20000] [--rounds 7] [--seconds 3]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import redis

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from _harness import compare_sync, report
from redis_support import RedisServer

from resilience import ResiliencePipeline, ResiliencePipelineBuilder
from resilience.stores import RedisCircuitStateStore
from resilience.strategies import CircuitBreakerStateProvider, CircuitState
from resilience.telemetry import TelemetryEvent, TelemetryOptions

LOCAL = "resilience circuit (local)"
SHARED = "resilience circuit (shared, Redis)"


def noop() -> None:
    return None


def circuit(store: RedisCircuitStateStore | None, key: str, interval: float = 0.1) -> ResiliencePipeline:
    builder = ResiliencePipelineBuilder(name="bench")
    if store is None:
        return builder.add_circuit_breaker().build()
    return builder.add_circuit_breaker(state_store=store, circuit_key=key, sync_interval=interval).build()


def commands(client: redis.Redis) -> int:
    """Every command the server executed so far, except INFO itself."""
    stats = client.info("commandstats")
    return sum(int(v["calls"]) for k, v in stats.items() if k != "cmdstat_info")


def paced(fn: object, calls: int, rate: float) -> float:
    """Call `fn` `calls` times at `rate` per second (busy-waiting); the achieved rate."""
    call = fn  # type: ignore[assignment]
    start = time.perf_counter()
    for i in range(calls):
        due = start + i / rate
        while time.perf_counter() < due:
            pass
        call()  # type: ignore[operator]
    return calls / (time.perf_counter() - start)


def success_path(port: int, number: int, rounds: int) -> str:
    import pybreaker

    client = redis.Redis(port=port)
    local = circuit(None, "")
    shared = circuit(RedisCircuitStateStore(client), f"bench-{uuid.uuid4().hex[:8]}")
    memory_breaker = pybreaker.CircuitBreaker(fail_max=100)
    redis_breaker = pybreaker.CircuitBreaker(
        fail_max=100,
        state_storage=pybreaker.CircuitRedisStorage(
            pybreaker.STATE_CLOSED, redis.Redis(port=port), namespace=f"pb-{uuid.uuid4().hex[:8]}"
        ),
    )
    candidates = {
        LOCAL: lambda: local.execute(noop),
        SHARED: lambda: shared.execute(noop),
        "pybreaker (memory)": lambda: memory_breaker.call(noop),
    }
    results = compare_sync(candidates, number=number, rounds=rounds)
    # pybreaker's Redis storage makes several round trips per call: far fewer calls suffice.
    slow = compare_sync(
        {LOCAL: lambda: local.execute(noop), "pybreaker CircuitRedisStorage": lambda: redis_breaker.call(noop)},
        number=max(200, number // 50),
        rounds=rounds,
    )
    results.append(slow[1])
    return report("Closed-state success path (sync, one thread)", results, baseline=LOCAL)


def traffic(port: int, seconds: float) -> str:
    import pybreaker

    client = redis.Redis(port=port)
    lines = [
        "### Redis commands per 1,000 successful calls",
        "",
        "| candidate | calls | achieved rate | commands | per 1,000 calls |",
        "|---|---:|---:|---:|---:|",
    ]
    for interval in (0.1, 1.0):
        pipeline = circuit(RedisCircuitStateStore(redis.Redis(port=port)), f"t-{uuid.uuid4().hex[:8]}", interval)
        time.sleep(2 * interval + 0.1)  # the first exchange is done
        calls = int(10_000 * seconds)
        before = commands(client)
        rate = paced(lambda pipeline=pipeline: pipeline.execute(noop), calls, 10_000)
        time.sleep(interval + 0.05)  # the last batch is sent
        sent = commands(client) - before
        lines.append(
            f"| {SHARED}, sync_interval={interval} | {calls:,} | {rate:,.0f}/s | {sent:,} | {sent * 1000 / calls:.1f} |"
        )
        del pipeline
        gc.collect()  # its sync stops with it: the next row counts only its own circuit
    breaker = pybreaker.CircuitBreaker(
        fail_max=100,
        state_storage=pybreaker.CircuitRedisStorage(
            pybreaker.STATE_CLOSED, redis.Redis(port=port), namespace=f"pb-{uuid.uuid4().hex[:8]}"
        ),
    )
    calls = 2_000
    before = commands(client)
    start = time.perf_counter()
    for _ in range(calls):
        breaker.call(noop)
    rate = calls / (time.perf_counter() - start)
    sent = commands(client) - before
    lines.append(
        f"| pybreaker CircuitRedisStorage (as fast as it goes) | {calls:,} | {rate:,.0f}/s | {sent:,} "
        f"| {sent * 1000 / calls:.0f} |"
    )
    return "\n".join(lines)


_OBSERVER = textwrap.dedent(
    """
    import json, sys, time, redis
    from resilience import ResiliencePipelineBuilder
    from resilience.stores import RedisCircuitStateStore
    port, key, interval = int(sys.argv[1]), sys.argv[2], float(sys.argv[3])
    pipeline = (ResiliencePipelineBuilder(name="bench").add_circuit_breaker(
        minimum_throughput=4, failure_ratio=0.5, break_duration=0.5,
        state_store=RedisCircuitStateStore(redis.Redis(port=port)), circuit_key=key,
        sync_interval=interval).build())
    control = redis.Redis(port=port)
    time.sleep(3 * interval)
    control.rpush(key + ":ready", 1)
    seen = []
    rejected = False
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not control.exists(key + ":stop"):
        outcome = pipeline.settle(lambda: None)
        now_rejected = not outcome.is_ok
        if now_rejected and not rejected:
            seen.append(time.time())
        rejected = now_rejected
        time.sleep(0.0005)
    control.rpush(key + ":seen", json.dumps(seen))
    """
)


def latency(port: int, openings: int, interval: float = 0.1) -> str:
    """An observer process calls every 0.5 ms; this process opens the fleet's circuit `openings` times."""
    key = f"lat-{uuid.uuid4().hex[:8]}"
    control = redis.Redis(port=port)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    observer = subprocess.Popen([sys.executable, "-c", _OBSERVER, str(port), key, str(interval)], env=env)
    provider = CircuitBreakerStateProvider()
    opened_at: list[float] = []

    def listen(event: TelemetryEvent) -> None:
        if event.name == "OnCircuitOpened":
            opened_at.append(time.time())

    pipeline = (
        ResiliencePipelineBuilder(name="bench", telemetry=TelemetryOptions(listeners=[listen]))
        .add_circuit_breaker(
            minimum_throughput=4,
            failure_ratio=0.5,
            break_duration=0.5,
            state_store=RedisCircuitStateStore(redis.Redis(port=port)),
            circuit_key=key,
            sync_interval=interval,
            state_provider=provider,
        )
        .build()
    )
    deadline = time.monotonic() + 20
    while not control.llen(key + ":ready") and time.monotonic() < deadline:
        time.sleep(0.01)

    def fail() -> None:
        raise ConnectionError

    for _ in range(openings):
        while provider.state is not CircuitState.OPEN:  # the observer's successes count too
            pipeline.settle(fail)
            time.sleep(0.0002)
        time.sleep(0.6)  # the break
        while provider.state is not CircuitState.CLOSED:  # probe until the fleet closes again
            pipeline.settle(noop)
            time.sleep(0.005)
        time.sleep(0.2)
    control.set(key + ":stop", 1)
    observer.wait(timeout=30)
    seen = json.loads(control.lrange(key + ":seen", 0, -1)[0])
    delays = sorted(delay * 1000 for delay in _openings(opened_at, seen))
    median = delays[len(delays) // 2] if delays else float("nan")
    return (
        "### An opening in one process seen by another (sync_interval=0.1)\n\n"
        f"{len(delays)} openings: median {median:.0f} ms, max {max(delays, default=float('nan')):.0f} ms "
        f"(expected at most sync_interval + one round trip = ~100 ms)."
    )


def _openings(opened_at: list[float], seen: list[float]) -> list[float]:
    """For each opening (this process's `OnCircuitOpened`), the time until the observer's first rejection."""
    delays = []
    for opened in opened_at:
        later = [t for t in seen if t >= opened - 0.001]
        if later:
            delays.append(later[0] - opened)
    return delays


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--number", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--openings", type=int, default=10)
    args = parser.parse_args()
    server = RedisServer()
    server.start()
    try:
        print(f"## Shared circuit state (Python {platform.python_version()}, load {os.getloadavg()[0]:.1f})\n")
        print(success_path(server.port, args.number, args.rounds) + "\n")
        print(traffic(server.port, args.seconds) + "\n")
        print(latency(server.port, args.openings))
    finally:
        server.close()


if __name__ == "__main__":
    main()
