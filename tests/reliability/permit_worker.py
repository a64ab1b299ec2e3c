"""A worker process of the fleet-wide concurrency-limit test: `python -m tests.reliability.permit_worker`.

Its threads run bodies through a pipeline with `add_concurrency_limiter(limit, store=RedisSemaphoreStore)`
for `duration` seconds. Each body, on the Redis server's clock, records its start and end, its
fencing token and whether its permit was lost (its signal aborted), and marks itself "inside"
(`inside:<run>:<pid>`) so that the parent can SIGSTOP a process while it holds a permit. The
records go to the list `<log>` as JSON; the parent checks them (see the test).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import threading
import time

import redis

from resilience import RateLimiterRejectedError, ResiliencePipelineBuilder, SemaphoreLeaseLostError, get_context
from resilience import get_lock_token as lock_token
from resilience.stores import RedisSemaphoreStore
from tests.reliability.fencing import server_us


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--key", required=True)
    parser.add_argument("--log", required=True)
    parser.add_argument("--limit", type=int, default=5)
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--ttl", type=float, default=2.0)
    parser.add_argument("--duration", type=float, default=10.0)
    args = parser.parse_args()
    pid = os.getpid()
    deadline = time.monotonic() + args.duration
    counts = {"rejected": 0, "lost": 0}
    lock = threading.Lock()

    def thread_main(index: int) -> None:
        client = redis.Redis(port=args.port, decode_responses=True)
        store = RedisSemaphoreStore(redis.Redis(port=args.port, socket_timeout=args.ttl / 3))
        pipeline = (
            ResiliencePipelineBuilder()
            .add_concurrency_limiter(args.limit, key=args.key, store=store, ttl=args.ttl, wait=args.ttl)
            .build()
        )
        rng = random.Random(f"{pid}-{index}")
        inside = f"inside:{args.log}:{pid}"

        def body() -> None:
            context = get_context()
            assert context is not None
            token = lock_token()
            start = server_us(client)
            client.set(inside, str(token))
            time.sleep(rng.uniform(0.02, 0.12))  # a SIGSTOP lands here, mid-body
            lost = context.signal.aborted
            client.delete(inside)
            end = server_us(client)
            record = {"pid": pid, "token": token, "start": start, "end": end, "lost": lost}
            client.rpush(args.log, json.dumps(record))

        try:
            while time.monotonic() < deadline:
                try:
                    pipeline.execute(body)
                except RateLimiterRejectedError:
                    with lock:
                        counts["rejected"] += 1
                except SemaphoreLeaseLostError:
                    with lock:
                        counts["lost"] += 1
        finally:
            store.close()
            client.close()

    threads = [threading.Thread(target=thread_main, args=(i,)) for i in range(args.threads)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    summary = redis.Redis(port=args.port, decode_responses=True)
    summary.rpush(f"{args.log}:summary", json.dumps({"pid": pid, **counts}))
    summary.close()


if __name__ == "__main__":
    main()
