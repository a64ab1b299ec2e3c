"""A worker process of the exclusion and fault tests: `python -m tests.reliability.worker ...`.

It contends for locks on the test server and logs what it saw to Redis lists (the parent reads
them; see `fencing.py` for the method). Each lock API it can go through is one entry of `VIA`:
a function that runs `body(token, signal)` under a lock on `key` and returns its result.

`pipeline` goes through the lock strategy; `mixed` picks, per critical section, either the
strategy or the primitive (`resilience.primitives.lock(client).hold(...)`) on the same keys,
so the checker also proves that the two exclude each other.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import random
import threading
import time
from typing import TYPE_CHECKING, Any

import redis

from resilience import LockNotAcquiredError, ResiliencePipelineBuilder, get_context, get_lock_token
from resilience.primitives import lock
from resilience.stores import RedisLockStore
from tests.reliability.fencing import Record, fenced_write, server_us

if TYPE_CHECKING:
    from collections.abc import Callable

    from resilience import Signal


def _via_pipeline(store: RedisLockStore, key: str, ttl: float, wait: float, body: Callable[[int, Signal], Any]) -> Any:
    pipeline = ResiliencePipelineBuilder().add_lock(key, ttl=ttl, wait=wait, store=store).build()

    def run() -> Any:
        context = get_context()
        token = get_lock_token()
        assert context is not None
        assert token is not None
        return body(token, context.signal)

    return pipeline.execute(run)


_LOCAL = threading.local()  # the thread's lock client and primitive (set by `contend`)


def _via_primitive(store: RedisLockStore, key: str, ttl: float, wait: float, body: Callable[[int, Signal], Any]) -> Any:
    locks = getattr(_LOCAL, "locks", None)
    if locks is None:
        locks = _LOCAL.locks = lock(_LOCAL.client, ttl=ttl)  # same prefix and scripts as `store`
    retry_delay = 0.01
    with locks.hold(key, ttl=ttl, retries=math.ceil(wait / retry_delay), retry_delay=retry_delay) as handle:
        assert get_lock_token() == handle.token
        return body(handle.token, handle.signal)


def _via_mixed(store: RedisLockStore, key: str, ttl: float, wait: float, body: Callable[[int, Signal], Any]) -> Any:
    via = _via_primitive if _LOCAL.rng.random() < 0.5 else _via_pipeline
    return via(store, key, ttl, wait, body)


VIA: dict[str, Callable[..., Any]] = {"pipeline": _via_pipeline, "mixed": _via_mixed}
VIA_NAMES = list(VIA)


def contend(args: argparse.Namespace) -> None:
    """Threads take random keys until `duration` passes, logging every critical section."""
    deadline = time.monotonic() + args.duration
    keys = args.keys.split(",")
    me = f"{os.getpid()}"
    via = VIA[args.via]

    def thread_main(index: int) -> None:
        client = redis.Redis(port=args.port, decode_responses=True)
        lock_client = client if args.lock_port is None else redis.Redis(port=args.lock_port, socket_timeout=2)
        store = RedisLockStore(lock_client)
        rng = random.Random(f"{me}-{index}")
        _LOCAL.client = lock_client
        _LOCAL.rng = random.Random(f"via-{me}-{index}")
        writer = f"{me}.{index}"
        rejected = errors = 0
        try:
            while time.monotonic() < deadline:
                key = rng.choice(keys)

                def body(token: int, signal: Signal, key: str = key) -> None:
                    start = server_us(client)
                    gauge = int(client.incr(f"gauge:{key}"))
                    client.set(f"holder:{key}", me)  # lets the chaos test pause a holder
                    time.sleep(rng.uniform(0, args.hold / 2))  # a pause here makes a stale write
                    accepted = fenced_write(client, key, token, writer)
                    time.sleep(rng.uniform(0, args.hold / 2))
                    client.decr(f"gauge:{key}")
                    end = server_us(client)
                    record = Record(key, token, start, end, gauge, accepted, writer, lost=signal.aborted)
                    client.rpush(args.log, record.dumps())

                try:
                    via(store, key, args.ttl, args.wait, body)
                except LockNotAcquiredError:
                    rejected += 1
                except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError):
                    errors += 1  # the lock server is restarting: retry outside the lock
                    time.sleep(0.05)
            client.rpush(f"{args.log}:rejected", rejected)
            client.rpush(f"{args.log}:errors", errors)
        finally:
            store.close()
            lock_client.close()
            client.close()

    threads = [threading.Thread(target=thread_main, args=(i,)) for i in range(args.threads)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def hold(args: argparse.Namespace) -> None:
    """Take one lock and write to the fenced resource every 50 ms for `duration` seconds.

    Logs `acquired <token>`, `write <token> <1|0> <server µs>` and finally
    `result <exception type or ok> <signal aborted 0|1>` to `args.log`.
    """
    client = redis.Redis(port=args.port, decode_responses=True)
    store = RedisLockStore(client)
    via = VIA[args.via]
    seen: dict[str, Signal] = {}

    def body(token: int, signal: Signal) -> None:
        seen["signal"] = signal
        client.rpush(args.log, f"acquired {token}")
        end = time.monotonic() + args.duration
        while time.monotonic() < end:
            signal.raise_if_aborted()
            ok = fenced_write(client, args.keys, token, f"holder-{os.getpid()}")
            client.rpush(args.log, f"write {token} {int(ok)} {server_us(client)}")
            time.sleep(0.05)

    outcome = "ok"
    try:
        via(store, args.keys, args.ttl, args.wait, body)
    except Exception as exc:
        outcome = type(exc).__name__
    aborted = "signal" in seen and seen["signal"].aborted
    with contextlib.suppress(Exception):
        client.rpush(args.log, f"result {outcome} {int(aborted)}")
    store.close()
    client.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=["contend", "hold"])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--keys", required=True)
    parser.add_argument("--log", required=True)
    parser.add_argument("--lock-port", type=int, default=None, help="the locks' server (default: --port)")
    parser.add_argument("--via", default="pipeline", choices=VIA_NAMES)
    parser.add_argument("--ttl", type=float, default=2.0)
    parser.add_argument("--wait", type=float, default=5.0)
    parser.add_argument("--duration", type=float, default=5.0)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--hold", type=float, default=0.005)
    args = parser.parse_args()
    {"contend": contend, "hold": hold}[args.mode](args)


if __name__ == "__main__":
    main()
