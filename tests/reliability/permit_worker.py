"""A worker process of the fleet tests of permits: `python -m tests.reliability.permit_worker`.

Its threads hold permits of one key in a loop for `duration` seconds, over one store per process:

- by default, through a pipeline with `add_concurrency_limiter(limit, store=RedisSemaphoreStore)`
  (one permit a body: the fleet-wide concurrency-limit test, which SIGSTOPs a holder);
- with `--permits`, through `semaphore(store, limit=...).run(key, body, permits=p, wait=...)`,
  `p` drawn from 1..3 each time, over a Redis or (`--postgres DSN`) a PostgreSQL semaphore
  store (the semaphore-permits fleet test, which SIGKILLs a holder).

Each body records on the Redis server's clock (the one clock every process reads) its start,
then its end, its token, its permits and whether its permits were lost (its signal aborted),
and marks itself "inside" (`inside:<log>:<pid>`) so that the parent can stop or kill a process
while it holds permits. A body's start is pushed before it sleeps, so a killed holder's start
is on record. The records go to the list `<log>` as JSON; the parent checks them (see the tests).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import threading
import time
from typing import TYPE_CHECKING

import redis

from resilience import (
    LockNotAcquiredError,
    RateLimiterRejectedError,
    ResiliencePipelineBuilder,
    SemaphoreLeaseLostError,
    Signal,
    get_context,
    get_lock_token,
)
from resilience.primitives import semaphore
from resilience.stores import PostgresSemaphoreStore, RedisSemaphoreStore
from tests.reliability.fencing import server_us

if TYPE_CHECKING:
    from collections.abc import Callable

    Body = Callable[[int, Signal, int], None]  # (token, signal, permits)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--key", required=True)
    parser.add_argument("--log", required=True)
    parser.add_argument("--permits", action="store_true", help="the semaphore primitive, 1..3 permits a body")
    parser.add_argument("--postgres", default="", help="with --permits: a PostgreSQL semaphore store's DSN")
    parser.add_argument("--limit", type=int, default=5)
    parser.add_argument("--threads", type=int, default=3)
    parser.add_argument("--ttl", type=float, default=1.5)
    parser.add_argument("--duration", type=float, default=6.0)
    args = parser.parse_args()
    pid = os.getpid()
    deadline = time.monotonic() + args.duration
    if args.postgres:
        store: PostgresSemaphoreStore | RedisSemaphoreStore = PostgresSemaphoreStore(args.postgres)
    else:
        store = RedisSemaphoreStore(redis.Redis(port=args.port, socket_timeout=args.ttl / 3))
    slots = semaphore(store, limit=args.limit, ttl=args.ttl)
    pipeline = (
        ResiliencePipelineBuilder()
        .add_concurrency_limiter(args.limit, key=args.key, store=store, ttl=args.ttl, wait=args.ttl)
        .build()
    )

    def in_pipeline(body: Body) -> None:
        context = get_context()
        assert context is not None
        body(get_lock_token() or 0, context.signal, 1)

    def hold(rng: random.Random, body: Body) -> None:
        if not args.permits:
            with contextlib.suppress(RateLimiterRejectedError, SemaphoreLeaseLostError):
                pipeline.execute(lambda: in_pipeline(body))
            return
        permits = rng.choice((1, 1, 2, 3))
        with contextlib.suppress(LockNotAcquiredError, SemaphoreLeaseLostError):
            slots.run(
                args.key, lambda handle: body(handle.token, handle.signal, permits), wait=args.ttl * 4, permits=permits
            )

    def thread_main(index: int) -> None:
        client = redis.Redis(port=args.port, decode_responses=True)
        rng = random.Random(f"{pid}-{index}")
        inside = f"inside:{args.log}:{pid}"

        def body(token: int, signal: Signal, permits: int) -> None:
            record = {"pid": pid, "token": token, "permits": permits, "start": server_us(client)}
            client.rpush(args.log, json.dumps({"kind": "start", **record}))
            client.set(inside, str(token))
            time.sleep(rng.uniform(0.02, 0.1))  # a SIGSTOP or SIGKILL lands here, mid-body
            lost = signal.aborted
            client.delete(inside)
            client.rpush(args.log, json.dumps({"kind": "end", **record, "end": server_us(client), "lost": lost}))

        try:
            while time.monotonic() < deadline:
                hold(rng, body)
        finally:
            client.close()

    threads = [threading.Thread(target=thread_main, args=(i,)) for i in range(args.threads)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    slots.close()
    pipeline.close()
    store.close()


if __name__ == "__main__":
    main()
