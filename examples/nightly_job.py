"""A nightly job that must not run twice at once, started by several workers.

Every worker wakes up "at midnight" and runs the job through the same pipeline:

    lock (outermost) -> retry -> timeout -> job

Only the worker holding the lease on "nightly-report" runs it; the others are rejected at once
(`wait=0`, the default). The job writes its report through a protected resource that checks the
lease's fencing token and refuses a stale one, which is what keeps a paused ex-holder from
overwriting a newer report.

By default the workers are threads on the in-memory store (one process). Set REDIS_URL to run
them as processes on Redis (see `make_store`).
"""

from __future__ import annotations

import os
import threading
import time

from resilience import LockNotAcquiredError, ResiliencePipelineBuilder, get_lock_token
from resilience.stores import AsyncLockStore, LockStore, MemoryLockStore
from resilience.telemetry import TelemetryEvent, TelemetryOptions

WORKERS = 4
KEY = "nightly-report"


class ReportTable:
    """The protected resource: it remembers the highest token it has seen and refuses older ones."""

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self.highest_token = 0
        self.rows: list[tuple[int, str]] = []

    def write(self, token: int, text: str) -> None:
        with self._guard:
            if token < self.highest_token:
                msg = f"stale fencing token {token} (already saw {self.highest_token}): write refused"
                raise PermissionError(msg)
            self.highest_token = token
            self.rows.append((token, text))


def make_store() -> LockStore | AsyncLockStore:
    """The lock store every worker shares.

    Hook for Redis (a later issue): when REDIS_URL is set, return
    `RedisLockStore(redis.Redis.from_url(os.environ["REDIS_URL"]))` and start the workers as
    processes (`multiprocessing`) instead of threads; everything else stays the same.
    """
    if os.environ.get("REDIS_URL"):
        print("REDIS_URL is set, but the Redis store is not in this build yet: using the memory store")
    return MemoryLockStore()


def print_event(event: TelemetryEvent) -> None:
    if event.name.startswith("Pipeline"):
        return
    arguments = event.arguments
    token = getattr(arguments, "token", None)
    waited = getattr(arguments, "wait_duration", None)
    held = getattr(arguments, "hold_duration", None)
    details = [f"token={token}" if token is not None else ""]
    details.append(f"waited={waited * 1000:.1f}ms" if waited is not None else "")
    details.append(f"held={held * 1000:.1f}ms" if held is not None else "")
    print(f"    event {event.name:<16} [{threading.current_thread().name}] {' '.join(d for d in details if d)}")


def main() -> None:
    store = make_store()
    table = ReportTable()
    pipeline = (
        ResiliencePipelineBuilder(name="nightly", telemetry=TelemetryOptions(listeners=[print_event]))
        .add_lock(KEY, ttl=2.0, store=store)
        # Inside the lock: a flaky report backend is retried, and each attempt bounded, while
        # the lease is held (a lost lease aborts the signal, and retry then stops at once).
        .add_retry(max_retries=2, delay=0.05, handle=ConnectionError)
        .add_timeout(5)
        .build()
    )

    def nightly_job(worker: str) -> str:
        token = get_lock_token()
        assert token is not None
        time.sleep(0.05)  # the work; the lease is renewed every ttl/3 while it runs
        table.write(token, f"report by {worker}")
        return f"{worker} ran the job with fencing token {token}"

    ran: list[str] = []
    rejected: list[str] = []
    start = threading.Barrier(WORKERS)

    def worker() -> None:
        name = threading.current_thread().name
        start.wait()  # midnight: everyone wakes up at once
        try:
            ran.append(pipeline.execute(nightly_job, name))
        except LockNotAcquiredError as exc:
            after = "" if exc.retry_after is None else f" (retry after {exc.retry_after:.2f}s)"
            rejected.append(f"{name} rejected: {exc}{after}")

    print(f"Round 1: {WORKERS} workers, fail fast")
    threads = [threading.Thread(target=worker, name=f"worker-{n}") for n in range(WORKERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for line in ran + rejected:
        print(f"  {line}")

    print("Round 2: the next night, one worker")
    print(f"  {pipeline.execute(nightly_job, 'worker-0')}")

    print("A paused ex-holder wakes up and writes with its old token:")
    try:
        table.write(1, "late report")
    except PermissionError as exc:
        print(f"  refused: {exc}")
    print(f"Reports written: {table.rows}")


if __name__ == "__main__":
    main()
