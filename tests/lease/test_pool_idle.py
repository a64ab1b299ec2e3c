"""Idle pool threads of the sync lease runtime sleep: they use no CPU and end after `IDLE_EXIT`.

A regression: idle threads woke each other on their shared condition (each one going idle
notified all the others), so a pool that had once grown to two or more threads spun on the CPU
for the life of the process, and its threads never reached their idle exit.
"""

from __future__ import annotations

import threading
import time

from resilience._runtime._pool import Pool


def _grow(pool: Pool, threads: int) -> None:
    """Make `pool` start `threads` threads (jobs that wait for each other), then let them go idle."""
    release = threading.Event()
    started = threading.Semaphore(0)

    def job() -> None:
        started.release()
        release.wait(5.0)

    for _ in range(threads):
        pool.submit(job)
    for _ in range(threads):
        assert started.acquire(timeout=5.0), "the pool did not start a thread per waiting job"
    assert pool.threads == threads
    release.set()
    assert pool.wait_idle(5.0)


def test_idle_threads_use_no_cpu() -> None:
    pool = Pool("idle-test", 4)
    _grow(pool, 4)
    time.sleep(0.05)  # the last threads settle into their wait
    before = time.process_time()
    time.sleep(0.5)
    used = time.process_time() - before
    # Sleeping threads cost nothing; four threads waking each other cost far more than this.
    assert used < 0.1, f"the process used {used:.2f} s of CPU while its pool was idle"


def test_idle_threads_end_after_idle_exit() -> None:
    pool = Pool("idle-exit-test", 3, idle=0.2)
    _grow(pool, 3)
    deadline = time.monotonic() + 5.0
    while pool.threads and time.monotonic() < deadline:
        time.sleep(0.05)
    assert pool.threads == 0, "idle threads kept waking each other and never ended"


def test_wait_idle_still_waits_for_running_jobs() -> None:
    pool = Pool("wait-idle-test", 2)
    release = threading.Event()
    pool.submit(lambda: release.wait(5.0))
    assert not pool.wait_idle(0.1)
    release.set()
    assert pool.wait_idle(5.0)
