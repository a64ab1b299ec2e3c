"""An asyncio worker pool that shares a semaphore: at most 3 jobs talk to the API at once.

Ten workers each take jobs from a queue; before calling the rate-limited API a worker takes a
slot of the `partner-api` semaphore (waiting for one with `retries`), and gives it back when
done. The slot's token is a fencing token too. With `REDIS_URL` set the semaphore lives in
Redis, so the limit holds across every process that uses it.
"""

from __future__ import annotations

import asyncio
import os
import random

from resilience import get_lock_token
from resilience.primitives import LockHandle, Semaphores, semaphore
from resilience.stores import MemorySemaphoreStore

LIMIT = 3
in_flight = 0
peak = 0


def make_client() -> object:
    url = os.environ.get("REDIS_URL")
    if url:
        from resilience.stores import async_redis_client

        return async_redis_client(url)
    return MemorySemaphoreStore()


async def call_partner_api(job: int, handle: LockHandle) -> str:
    global in_flight, peak  # noqa: PLW0603 - the example's own counters
    in_flight += 1
    peak = max(peak, in_flight)
    try:
        await asyncio.sleep(random.uniform(0.005, 0.02))  # the API call
        return f"job {job:2d} done in slot token {handle.token} (ambient token {get_lock_token()})"
    finally:
        in_flight -= 1


async def worker(name: str, jobs: asyncio.Queue[int], slots: Semaphores, results: list[str]) -> None:
    while True:
        try:
            job = jobs.get_nowait()
        except asyncio.QueueEmpty:
            return
        result = await slots.run_async(
            "partner-api", lambda handle, job=job: call_partner_api(job, handle), retries=200, retry_delay=0.005
        )
        results.append(f"{name}: {result}")


async def main() -> None:
    slots = semaphore(make_client(), limit=LIMIT, ttl=5)
    jobs: asyncio.Queue[int] = asyncio.Queue()
    for job in range(20):
        jobs.put_nowait(job)
    results: list[str] = []
    async with asyncio.TaskGroup() as group:
        for index in range(10):
            group.create_task(worker(f"worker-{index}", jobs, slots, results))
    for line in results:
        print(line)
    print(f"{len(results)} jobs, at most {peak} at once (limit {LIMIT})")
    assert peak <= LIMIT
    await slots.aclose()  # closes only what the primitive opened itself


if __name__ == "__main__":
    asyncio.run(main())
