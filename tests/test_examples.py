"""Every example runs, as `make demo` runs it, and tells its story."""

from __future__ import annotations

import json
import os
import random
import re
import signal
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from tests.redis_support import RedisServer

EXAMPLES = Path(__file__).parent.parent / "examples"


def run(name: str, *args: str, timeout: float = 60, env: dict[str, str] | None = None) -> str:
    completed = subprocess.run(
        [sys.executable, str(EXAMPLES / name), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        env=env,
    )
    assert completed.returncode == 0, completed.stderr
    return completed.stdout


def test_every_example_is_covered_here() -> None:
    """A new example must get a test in this module."""
    tested = {
        "quickstart.py",
        "nightly_job.py",
        "telemetry_prometheus.py",
        "http_client.py",
        "worker_pool.py",
        "leader_election.py",
    }
    assert {p.name for p in EXAMPLES.glob("*.py")} <= tested


@pytest.mark.parametrize("name", ["quickstart.py"])
def test_quickstart_tells_its_story(name: str) -> None:
    """The quick start prints results, the failure, and the events."""
    out = run(name)
    assert "-> widget: 42.00" in out
    assert out.count("Retry: OnRetry after ConnectionError") >= 2
    assert "Timeout: OnTimeout" in out
    assert "failed: TimeoutRejectedError" in out
    assert "CircuitBreaker: OnCircuitOpened" in out
    assert "BrokenCircuitError" in out


def test_nightly_job_runs_once_per_night_with_increasing_tokens() -> None:
    """One worker of four runs the job; the others are rejected; a stale token is refused."""
    out = run("nightly_job.py")
    assert out.count("ran the job with fencing token") == 2
    assert out.count("rejected: lock 'nightly-report' is held") == 3
    assert "refused: stale fencing token 1" in out
    assert "OnLockAcquired" in out
    assert "OnLockReleased" in out


@pytest.mark.redis
def test_nightly_job_on_redis_runs_in_one_process_of_four(redis_server: RedisServer) -> None:
    """With REDIS_URL the workers are processes on RedisLockStore: one runs, three are rejected."""
    env = {**os.environ, "REDIS_URL": redis_server.url}
    out = run("nightly_job.py", env=env)
    assert "4 worker processes on Redis" in out
    assert len(re.findall(r"process-\d+ ran the job with fencing token \d+", out)) == 1
    assert len(re.findall(r"process-\d+ rejected: lock 'nightly-report' is held", out)) == 3
    assert out.count("ran the job with fencing token") == 2  # and the next night, once more
    assert "refused: stale fencing token 1" in out
    # Both nights' reports are written, round 1's by the process that held the lock, in token order.
    (winner, token) = re.findall(r"(process-\d+) ran the job with fencing token (\d+)", out)[0]
    (written,) = re.findall(r"Reports written: (.*)", out)
    assert written.startswith(f"[({token}, 'report by {winner}'), (")
    assert written.count("report by") == 2


def test_leader_election_hands_over_in_turn_and_refuses_a_stale_term() -> None:
    """Three candidates lead one after the other with increasing terms; the shutdown ends the last."""
    out = run("leader_election.py")
    leads = re.findall(r"(scheduler-\d) leads \(term (\d+)\)", out)
    assert [name for name, _ in leads] == ["scheduler-1", "scheduler-2", "scheduler-3"]
    assert [int(term) for _, term in leads] == [1, 2, 3]
    assert "leader now: scheduler-3 (term 3" in out
    assert "scheduler-1 stepped down after 3 ticks" in out
    assert "scheduler-2 stepped down after 3 ticks" in out
    # The last leads until the shutdown, 3 ticks after the main thread saw it lead: it may
    # have made 3 or 4 by then on a loaded machine.
    assert "scheduler-3 stepped down after" in out
    assert "refused: stale term 1 (already saw 3)" in out
    assert "enqueued by terms [1, 2, 3]" in out


@pytest.mark.redis
def test_leader_election_on_redis_replaces_a_killed_leader(redis_server: RedisServer) -> None:
    """With REDIS_URL the candidates are processes: each SIGKILLed leader is replaced by another, with a higher term."""
    out = run("leader_election.py", env={**os.environ, "REDIS_URL": redis_server.url}, timeout=120)
    killed = re.findall(r"killed the leader (scheduler-\d) \(term (\d+)\)", out)
    took = re.findall(r"(scheduler-\d) took over in ([\d.]+) s", out)
    assert len(killed) == 2
    assert len(took) == 2
    assert killed[1][0] == took[0][0]  # the one that took over is the next one killed
    assert int(killed[1][1]) > int(killed[0][1])
    assert {name for name, _ in killed} | {took[1][0]} == {"scheduler-1", "scheduler-2", "scheduler-3"}
    assert all(float(seconds) < 30 for _, seconds in took)


def _free_port() -> int:
    """A free port below the kernel's ephemeral range (32768+ on Linux).

    A port from `bind(0)` is ephemeral: once this probe closes it, a server another test
    starts on port 0 may be handed the same one before the program under test binds it.
    """
    rng = random.Random()
    for _ in range(1000):
        port = rng.randrange(20_000, 32_000)
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    msg = "no free port in 20000-32000"
    raise RuntimeError(msg)


def _dashboard_metrics() -> set[str]:
    dashboard = json.loads((EXAMPLES.parent / "docs" / "dashboards" / "resilience.json").read_text())
    exprs = [target["expr"] for panel in dashboard["panels"] for target in panel["targets"]]
    exprs.append(dashboard["templating"]["list"][1]["query"]["query"])
    return {name for expr in exprs for name in re.findall(r"\b(resilience_[a-z_]+)", expr)}


def test_prometheus_example_exports_every_metric_the_dashboard_queries() -> None:
    """Scrape the example's /metrics on localhost: every series the dashboard names is there."""
    port = _free_port()
    process = subprocess.Popen(
        [sys.executable, str(EXAMPLES / "telemetry_prometheus.py"), "--port", str(port), "--serve-seconds", "60"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        assert "workload done" in line, process.stderr.read() if process.stderr else line
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
            exported = response.read().decode()
    finally:
        process.terminate()
        process.communicate(timeout=10)
    wanted = _dashboard_metrics()
    assert wanted >= {"resilience_strategy_events_total", "resilience_pipeline_duration_seconds_bucket"}
    missing = sorted(name for name in wanted if f"\n{name}{{" not in exported)
    assert not missing, f"the dashboard queries metrics the example does not export: {missing}"
    for event in ("OnRetry", "OnCircuitOpened", "OnTimeout", "OnLockRejected", "OnLockAcquired", "OnLockReleased"):
        assert f'event_name="{event}"' in exported


def _retries_exported(port: int) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        exported = response.read().decode()
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in exported.splitlines()
        if line.startswith("resilience_strategy_events_total{") and 'event_name="OnRetry"' in line
    )


def test_prometheus_example_keeps_serving_with_serve_until_interrupted() -> None:
    """`--serve` keeps the endpoint up and the workload going (counters grow) until Ctrl-C.

    The first Ctrl-C asks for a stop after the workload under way: it ends within one workload.
    """
    port = _free_port()
    process = subprocess.Popen(
        [
            sys.executable,
            str(EXAMPLES / "telemetry_prometheus.py"),
            "--port",
            str(port),
            "--serve",
            "--interval",
            "2",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        assert "workload done" in process.stdout.readline()
        first = _retries_exported(port)
        assert process.stdout.readline().startswith("serving")
        assert process.stdout.readline().startswith("workload 2 done")
        assert _retries_exported(port) > first > 0
        process.send_signal(signal.SIGINT)
        out, _ = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == 0
    assert out.rstrip().endswith("stopped")


def test_http_client_honours_retry_after_and_opens_the_circuit() -> None:
    """Retry-After sets the delays; a dead server opens the circuit and callers fail fast."""
    out = run("http_client.py")
    assert out.count("got 503; retrying in 0.05s") == 2
    assert "-> 200 price: 42.00" in out
    assert out.count("ServerError: 500") == 2
    assert "rejected without a request: the circuit is open" in out


def test_worker_pool_never_exceeds_the_semaphore() -> None:
    """Ten asyncio workers share a semaphore of three: every job runs, never more than three at once."""
    out = run("worker_pool.py")
    assert "20 jobs, at most" in out
    peak = int(re.search(r"at most (\d+) at once", out).group(1))  # type: ignore[union-attr]
    assert 1 <= peak <= 3
