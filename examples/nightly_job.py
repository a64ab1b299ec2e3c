"""A nightly job that must not run twice at once, started by several workers.

Every worker wakes up "at midnight" and runs the job through the same pipeline:

    lock (outermost) -> retry -> timeout -> job

Only the worker holding the lease on "nightly-report" runs it; the others are rejected at once
(`wait=0`, the default). The job writes its report through a protected resource that checks the
lease's fencing token and refuses a stale one, which is what keeps a paused ex-holder from
overwriting a newer report.

By default the workers are threads on the in-memory store (one process). Set REDIS_URL (for
example `REDIS_URL=redis://localhost:6379/0 make demo`) to run them as separate processes on
`RedisLockStore`: each prints its process id and, if it ran, its fencing token.
"""

from __future__ import annotations

import multiprocessing
import os
import threading
import time
from typing import TYPE_CHECKING, Any

from resilience import LockNotAcquiredError, ResiliencePipelineBuilder, get_lock_token
from resilience.stores import AsyncLockStore, LockStore, MemoryLockStore
from resilience.telemetry import TelemetryEvent, TelemetryOptions

if TYPE_CHECKING:
    from resilience import ResiliencePipeline

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
    """The lock store every worker shares: Redis when REDIS_URL is set, else in memory."""
    url = os.environ.get("REDIS_URL")
    if url:
        from resilience.stores import RedisLockStore, redis_client

        client = redis_client(url)
        _CLIENTS.append(client)
        return RedisLockStore(client)
    return MemoryLockStore()


_CLIENTS: list[Any] = []
"""The Redis clients `make_store` opened (closed by `close_store`)."""


def close_store(store: object) -> None:
    """Close a Redis store and the clients opened for it (the memory store needs nothing)."""
    close = getattr(store, "close", None)
    if callable(close):
        close()
    while _CLIENTS:
        _CLIENTS.pop().close()


def build_pipeline(store: LockStore | AsyncLockStore) -> ResiliencePipeline:
    """lock (outermost) -> retry -> timeout, printing the lock events."""
    return (
        ResiliencePipelineBuilder(name="nightly", telemetry=TelemetryOptions(listeners=[print_event]))
        .add_lock(KEY, ttl=2.0, store=store)
        # Inside the lock: a flaky report backend is retried, and each attempt bounded, while
        # the lease is held (a lost lease aborts the signal, and retry then stops at once).
        .add_retry(max_retries=2, delay=0.05, handle=ConnectionError)
        .add_timeout(5)
        .build()
    )


def process_worker(start: Any, results: Any) -> None:
    """One worker process (REDIS_URL): its own client and pipeline, the lock in Redis."""
    store = make_store()
    name = f"process-{os.getpid()}"
    try:
        pipeline = build_pipeline(store)

        def job() -> tuple[str, int | None]:
            time.sleep(1.0)  # the work: every other process, even one slow to wake, finds the lock held
            token = get_lock_token()
            return f"{name} ran the job with fencing token {token}", token

        start.wait()  # midnight: every process wakes up at once
        try:
            line, token = pipeline.execute(job)
            results.put((line, token, name))
        except LockNotAcquiredError as exc:
            results.put((f"{name} rejected: {exc}", None, name))
    finally:
        close_store(store)


def run_processes() -> list[tuple[str, int | None, str]]:
    """Round 1 with REDIS_URL: WORKERS processes race for the lock in Redis.

    Each answers (its line, its fencing token if it ran, its name): the report table lives in
    this process, so the winner's report is written here, with the token it held.
    """
    context = multiprocessing.get_context("spawn")
    start = context.Barrier(WORKERS)
    results = context.Queue()
    processes = [context.Process(target=process_worker, args=(start, results)) for _ in range(WORKERS)]
    for process in processes:
        process.start()
    lines = [results.get(timeout=60) for _ in processes]
    for process in processes:
        process.join(timeout=60)
    return sorted(lines, key=lambda line: line[1] is None)


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
    try:
        run_nights(store)
    finally:
        close_store(store)


def run_nights(store: LockStore | AsyncLockStore) -> None:
    table = ReportTable()
    pipeline = build_pipeline(store)

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

    if os.environ.get("REDIS_URL"):
        print(f"Round 1: {WORKERS} worker processes on Redis, fail fast")
        for line, token, name in run_processes():
            print(f"  {line}")
            if token is not None:
                table.write(token, f"report by {name}")
    else:
        print(f"Round 1: {WORKERS} workers, fail fast")
        run_threads(worker)
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


def run_threads(worker: Any) -> None:
    """Round 1 without REDIS_URL: WORKERS threads race for the in-memory lock."""
    threads = [threading.Thread(target=worker, name=f"worker-{n}") for n in range(WORKERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


if __name__ == "__main__":
    main()
