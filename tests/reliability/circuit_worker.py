"""A process of the shared-circuit tests: `python -m tests.reliability.circuit_worker MODE ...`.

Every process builds the same shared circuit (`--key`) over the test server and, once its
first sync has answered, pushes `ready` to `<log>:ready`. Then:

- `observe` waits for `<log>:go`, then calls a local no-op every 2 ms until `<log>:stop` exists or `--duration` passes,
  and records each change of what it sees — the state provider's state and the call's fate
  (`ok`, `BrokenCircuitError`, `IsolatedCircuitError`) — with `time.time()`. It keeps the record
  in memory (the server may be restarting) and pushes it to `<log>:<pid>` as JSON at the end.
- `first` makes its first call as soon as the pipeline is built (no waiting for a sync) and
  pushes that call's fate to `<log>:first`.
- `hammer` waits for `<log>:go`, then calls the dependency for `--duration` seconds. The
  dependency logs its own start and end (`time.time()`) to `<log>:dependency`, takes
  `--hold` seconds and always fails: every call that reaches it is a probe.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import time
from typing import Any

import redis

from resilience import ResiliencePipeline, ResiliencePipelineBuilder
from resilience.stores import RedisCircuitStateStore
from resilience.strategies import CircuitBreakerStateProvider


def build(args: argparse.Namespace, provider: CircuitBreakerStateProvider) -> ResiliencePipeline:
    # Short socket timeouts: the restart test stops the server under the processes.
    client = redis.Redis(port=args.port, socket_timeout=0.5, socket_connect_timeout=0.5)
    counting: dict[str, Any] = (
        {"consecutive_failures": args.consecutive}
        if args.consecutive
        else {"failure_ratio": 0.5, "minimum_throughput": args.throughput}
    )
    return (
        ResiliencePipelineBuilder(name="fleet")
        .add_circuit_breaker(
            **counting,
            break_duration=args.break_duration,
            handle=ConnectionError,
            state_store=RedisCircuitStateStore(client),
            circuit_key=args.key,
            sync_interval=args.interval,
            state_provider=provider,
        )
        .build()
    )


def ready(args: argparse.Namespace, control: redis.Redis, provider: CircuitBreakerStateProvider) -> None:
    """Wait for the first sync (the key exists and a few intervals passed), then say so."""
    deadline = time.monotonic() + 30
    while not control.exists(f"circuit:{args.key}") and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(3 * args.interval)
    control.rpush(f"{args.log}:ready", f"{os.getpid()} {provider.state.name}")


def wait_for_go(args: argparse.Namespace, control: redis.Redis) -> None:
    """Start together: a worker that is ready long before the others must not pile up calls."""
    deadline = time.monotonic() + 60  # the other workers may be slow to start
    while not control.exists(f"{args.log}:go") and time.monotonic() < deadline:
        time.sleep(0.005)


def observe(args: argparse.Namespace, control: redis.Redis) -> None:
    provider = CircuitBreakerStateProvider()
    pipeline = build(args, provider)
    ready(args, control, provider)
    # Each observed call is a success in the fleet's window: an observer that ran for seconds
    # before the test began to fail would outweigh its failures (a loaded machine starts the
    # second worker late, and this process under coverage fails only a few thousand times a second).
    wait_for_go(args, control)
    seen: list[dict[str, object]] = []
    last: tuple[str, str] | None = None
    deadline = time.monotonic() + args.duration
    checks = 0
    passed = 0
    while time.monotonic() < deadline:
        outcome = pipeline.settle(lambda: None)
        fate = "ok" if outcome.is_ok else type(outcome.error).__name__
        passed += outcome.is_ok
        now = (provider.state.name, fate)
        if now != last:
            seen.append({"t": time.time(), "state": now[0], "fate": fate})
            last = now
        checks += 1
        if checks % 25 == 0:
            with contextlib.suppress(redis.exceptions.RedisError):
                if control.exists(f"{args.log}:stop"):
                    break
        # 10 ms apart: the observers' successes stay well below what the failing member sends,
        # even when a loaded machine gives it less CPU than them (the opening is then seen
        # within 10 ms more, far inside the test's margin).
        time.sleep(0.01)
    record = json.dumps({"seen": seen, "passed": passed, "calls": checks})
    for _ in range(100):  # the server may still be coming back
        try:
            control.rpush(f"{args.log}:{os.getpid()}", record)
            break
        except redis.exceptions.RedisError:
            time.sleep(0.1)


def first(args: argparse.Namespace, control: redis.Redis) -> None:
    pipeline = build(args, CircuitBreakerStateProvider())
    outcome = pipeline.settle(lambda: None)
    control.rpush(f"{args.log}:first", "ok" if outcome.is_ok else type(outcome.error).__name__)


def hammer(args: argparse.Namespace, control: redis.Redis) -> None:
    provider = CircuitBreakerStateProvider()
    pipeline = build(args, provider)
    ready(args, control, provider)
    wait_for_go(args, control)

    def dependency() -> None:
        start = time.time()
        time.sleep(args.hold)
        control.rpush(f"{args.log}:dependency", json.dumps([start, time.time(), os.getpid()]))
        raise ConnectionError("still down")

    deadline = time.monotonic() + args.duration
    while time.monotonic() < deadline:
        pipeline.settle(dependency)
        time.sleep(0.002)
    control.rpush(f"{args.log}:done", os.getpid())


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=["observe", "hammer", "first"])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--key", required=True)
    parser.add_argument("--log", required=True)
    parser.add_argument("--interval", type=float, default=0.1)
    parser.add_argument("--break-duration", type=float, default=0.3)
    parser.add_argument("--throughput", type=int, default=4)
    parser.add_argument("--consecutive", type=int, default=0, help="consecutive_failures instead of a ratio")
    parser.add_argument("--duration", type=float, default=5.0)
    parser.add_argument("--hold", type=float, default=0.05)
    args = parser.parse_args()
    control = redis.Redis(port=args.port, socket_timeout=2)
    {"observe": observe, "hammer": hammer, "first": first}[args.mode](args, control)


if __name__ == "__main__":
    main()
