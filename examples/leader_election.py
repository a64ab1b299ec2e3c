"""A scheduler that must run in exactly one place at a time: leader election.

Three candidates call `election(store, "scheduler", identity=...).run(schedule)`. The first one
elected leads: every tick it enqueues the jobs that are due, stamped with its term (the lease's
fencing token), into a job queue that refuses a term older than one it has seen. The other
candidates wait in line. When the leader stops leading, the next candidate in line leads, with
a higher term.

By default the candidates are threads on the in-memory store: each leader steps down after a
few ticks, and the last one leads until the shutdown signal ends it (as Ctrl-C or a SIGTERM
handler would). Set REDIS_URL (for example `REDIS_URL=redis://localhost:6379/0`) to run them as
processes on Redis: the leader is killed with SIGKILL, twice, and a candidate in another
process takes over within the ttl plus one hand-off.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import threading
import time
from typing import TYPE_CHECKING

from resilience import Signal, use_context
from resilience.primitives import election
from resilience.stores import MemoryLockStore

if TYPE_CHECKING:
    from resilience.primitives import LockHandle

TTL = 2.0
TICK = 0.1


class JobQueue:
    """The protected resource: it refuses jobs from a term older than the newest it has seen."""

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self.newest_term = 0
        self.jobs: list[tuple[int, str]] = []

    def enqueue(self, term: int, job: str) -> None:
        with self._guard:
            if term < self.newest_term:
                msg = f"stale term {term} (already saw {self.newest_term}): job refused"
                raise PermissionError(msg)
            self.newest_term = term
            self.jobs.append((term, job))


def in_one_process() -> None:
    store = MemoryLockStore()
    queue = JobQueue()
    shutdown = Signal()
    done = threading.Event()
    names = ["scheduler-1", "scheduler-2", "scheduler-3"]

    def candidate(name: str, ticks: int | None) -> None:
        def schedule(handle: LockHandle) -> str:
            print(f"{name} leads (term {handle.token})")
            tick = 0
            while not handle.signal.aborted and (ticks is None or tick < ticks):
                tick += 1
                queue.enqueue(handle.token, f"report batch {tick} of {name}")
                handle.signal.wait(TICK)
            if ticks is None:
                done.set()
            return f"{name} stepped down after {tick} ticks"

        with use_context(signal=shutdown):  # the shutdown ends a wait in line, and the leadership
            print(election(store, "scheduler", identity=name, ttl=TTL).run(schedule))

    threads = [threading.Thread(target=candidate, args=(name, 3 if name != names[-1] else None)) for name in names]
    for thread in threads:
        thread.start()
        time.sleep(0.05)  # in line in this order
    watcher = election(store, "scheduler", ttl=TTL)
    while (leader := watcher.leader()) is None or leader.identity != names[-1]:
        time.sleep(TICK / 2)
    print(f"leader now: {leader.identity} (term {leader.token}, {leader.expires_in:.1f} s left on its lease)")
    time.sleep(3 * TICK)
    shutdown.abort()  # what a SIGTERM handler does
    for thread in threads:
        thread.join()
    assert done.is_set()
    try:
        queue.enqueue(1, "a late job from the first leader")
    except PermissionError as exc:
        print(f"refused: {exc}")
    terms = sorted({term for term, _ in queue.jobs})
    print(f"{len(queue.jobs)} jobs enqueued by terms {terms}")


def candidate_process(url: str, name: str) -> None:
    from resilience.stores import redis_client

    def schedule(handle: LockHandle) -> None:
        print(f"{name} (pid {os.getpid()}) leads (term {handle.token})", flush=True)
        while not handle.signal.wait(TICK):
            pass

    election(redis_client(url), "scheduler", identity=name, ttl=TTL).run(schedule)


def across_processes(url: str) -> None:
    from resilience.stores import redis_client

    context = multiprocessing.get_context("spawn")
    processes = {
        name: context.Process(target=candidate_process, args=(url, name))
        for name in ("scheduler-1", "scheduler-2", "scheduler-3")
    }
    for process in processes.values():
        process.start()
    watcher = election(redis_client(url), "scheduler", ttl=TTL)
    try:
        term = 0
        for _ in range(2):
            while (leader := watcher.leader()) is None or leader.token <= term:
                time.sleep(0.01)
            term = leader.token
            time.sleep(0.5)  # let it lead a little
            killed = time.monotonic()
            pid = processes[leader.identity].pid
            assert pid is not None
            os.kill(pid, signal.SIGKILL)
            print(f"killed the leader {leader.identity} (term {term})", flush=True)
            while (after := watcher.leader()) is None or after.token <= term:
                time.sleep(0.01)
            print(f"{after.identity} took over in {time.monotonic() - killed:.1f} s (ttl {TTL:g} s)", flush=True)
    finally:
        for process in processes.values():
            process.kill()
            process.join()
        watcher.close()


if __name__ == "__main__":
    redis_url = os.environ.get("REDIS_URL")
    if redis_url:
        across_processes(redis_url)
    else:
        in_one_process()
