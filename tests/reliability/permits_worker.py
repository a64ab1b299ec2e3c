"""A worker process of the semaphore-permits fleet test: `python -m tests.reliability.permits_worker`.

Its threads loop on `semaphore(store, limit=...).run(key, body, permits=p, wait=...)`, with `p`
drawn from 1..3 each time, over a Redis or a PostgreSQL semaphore store. Each body records on
the Redis server's clock (the one clock every process reads) its start, then its end, its
token, its permits and whether its slots were lost (its signal aborted), and marks itself
"inside" (`inside:<log>:<pid>`) so that the parent can SIGKILL a process while it holds slots.
A body's start is pushed before it sleeps, so a killed holder's start is on record.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import threading
import time

import redis

from resilience import LockNotAcquiredError, SemaphoreLeaseLostError
from resilience.primitives import LockHandle, semaphore
from resilience.stores import PostgresSemaphoreStore, RedisSemaphoreStore
from tests.reliability.fencing import server_us


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--postgres", default="")
    parser.add_argument("--key", required=True)
    parser.add_argument("--log", required=True)
    parser.add_argument("--limit", type=int, default=5)
    parser.add_argument("--threads", type=int, default=3)
    parser.add_argument("--ttl", type=float, default=1.5)
    parser.add_argument("--duration", type=float, default=6.0)
    args = parser.parse_args()
    pid = os.getpid()
    deadline = time.monotonic() + args.duration
    if args.postgres:
        store: object = PostgresSemaphoreStore(args.postgres)
    else:
        store = RedisSemaphoreStore(redis.Redis(port=args.port, socket_timeout=args.ttl / 3))
    slots = semaphore(store, limit=args.limit, ttl=args.ttl)

    def thread_main(index: int) -> None:
        client = redis.Redis(port=args.port, decode_responses=True)
        rng = random.Random(f"{pid}-{index}")
        inside = f"inside:{args.log}:{pid}"

        def body(handle: LockHandle, permits: int) -> None:
            start = server_us(client)
            record = {"kind": "start", "pid": pid, "token": handle.token, "permits": permits, "start": start}
            client.rpush(args.log, json.dumps(record))
            client.set(inside, str(handle.token))
            time.sleep(rng.uniform(0.02, 0.1))  # a SIGKILL lands here, mid-body
            lost = handle.signal.aborted
            client.delete(inside)
            end = server_us(client)
            record = {"kind": "end", "pid": pid, "token": handle.token, "permits": permits, "end": end, "lost": lost}
            client.rpush(args.log, json.dumps(record))

        try:
            while time.monotonic() < deadline:
                permits = rng.choice((1, 1, 2, 3))
                with contextlib.suppress(LockNotAcquiredError, SemaphoreLeaseLostError):
                    slots.run(args.key, lambda handle, p=permits: body(handle, p), wait=args.ttl * 4, permits=permits)
        finally:
            client.close()

    threads = [threading.Thread(target=thread_main, args=(i,)) for i in range(args.threads)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    slots.close()
    if args.postgres:
        store.close()  # type: ignore[attr-defined]


if __name__ == "__main__":
    main()
