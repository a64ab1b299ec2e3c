"""Shared circuits across real processes: latency of an opening, one probe, isolation, restarts.

The processes are `tests/reliability/circuit_worker.py`; this test process is one more member
of the fleet. Times are `time.time()` of one machine, so they compare across processes.
"""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
import time
from typing import TYPE_CHECKING, Any

import pytest
import redis

from resilience import ResiliencePipeline, ResiliencePipelineBuilder
from resilience.stores import RedisCircuitStateStore
from resilience.stores._redis_circuit import CircuitExchange
from resilience.strategies import CircuitBreakerManualControl, CircuitBreakerStateProvider, CircuitState
from resilience.telemetry import TelemetryOptions
from tests.reliability.conftest import ROOT, wait_for

if TYPE_CHECKING:
    from collections.abc import Iterator

    from resilience.telemetry import TelemetryEvent
    from tests.redis_support import RedisServer

pytestmark = [pytest.mark.redis, pytest.mark.slow]

INTERVAL = 0.1
MARGIN = 2.0
"""Slack on top of `sync_interval` + 50 ms for a loaded machine (a worker process descheduled for
a second on two busy cores); a fleet that does not share its state never sees the change at all,
so the slack does not hide a failure. The measured values are printed."""


class Fleet:
    """Worker processes of one shared circuit; kills what is left at teardown."""

    def __init__(self, port: int, key: str, log: str) -> None:
        self.port, self.key, self.log = port, key, log
        self.processes: list[subprocess.Popen[bytes]] = []

    def start(self, mode: str, **options: object) -> subprocess.Popen[bytes]:
        args = [sys.executable, "-m", "tests.reliability.circuit_worker", mode]
        args += ["--port", str(self.port), "--key", self.key, "--log", self.log, "--interval", str(INTERVAL)]
        for name, value in options.items():
            args += [f"--{name.replace('_', '-')}", str(value)]
        process = subprocess.Popen(args, cwd=ROOT, stderr=subprocess.PIPE)
        self.processes.append(process)
        return process

    def ready(self, count: int, client: Any, timeout: float = 60) -> None:
        """Wait until `count` workers said ready (slow to start on a loaded machine); a dead one fails at once."""

        def check() -> bool:
            for process in self.processes:
                if process.poll() not in (None, 0):
                    _, errors = process.communicate()
                    pytest.fail(f"worker {process.pid} died: {errors.decode(errors='replace')[-3000:]}")
            return bool(client.llen(f"{self.log}:ready") >= count)

        wait_for(check, timeout=timeout)

    def wait(self, timeout: float = 60) -> None:
        for process in self.processes:
            _, errors = process.communicate(timeout=timeout)
            assert process.returncode == 0, errors.decode(errors="replace")[-3000:]

    def close(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                process.kill()
            process.wait(timeout=10)
            if process.stderr is not None:
                process.stderr.close()


@pytest.fixture
def fleet_factory() -> Iterator[list[Fleet]]:
    fleets: list[Fleet] = []
    yield fleets
    for fleet in fleets:
        fleet.close()


def make_fleet(fleets: list[Fleet], server: RedisServer, uid: str) -> Fleet:
    fleet = Fleet(server.port, f"fleet-{uid}", f"log-{uid}")
    fleets.append(fleet)
    return fleet


def member(
    server: RedisServer,
    key: str,
    events: list[tuple[float, TelemetryEvent]] | None = None,
    *,
    control: CircuitBreakerManualControl | None = None,
    provider: CircuitBreakerStateProvider | None = None,
    break_duration: float = 0.3,
) -> ResiliencePipeline:
    """This process's member of the fleet."""
    telemetry = None if events is None else TelemetryOptions(listeners=[lambda e: events.append((time.time(), e))])
    client = redis.Redis(port=server.port, socket_timeout=0.5, socket_connect_timeout=0.5)
    return (
        ResiliencePipelineBuilder(name="fleet", telemetry=telemetry)
        .add_circuit_breaker(
            failure_ratio=0.5,
            minimum_throughput=4,
            break_duration=break_duration,
            handle=ConnectionError,
            state_store=RedisCircuitStateStore(client),
            circuit_key=key,
            sync_interval=INTERVAL,
            manual_control=control,
            state_provider=provider,
        )
        .build()
    )


def fail() -> None:
    raise ConnectionError("dependency down")


def fail_until_open(pipeline: ResiliencePipeline, opened: Any) -> int:
    """Fail here until the fleet opens: the others' successes count too, so it takes many."""
    failures = 0
    deadline = time.monotonic() + 30
    while not opened() and time.monotonic() < deadline:
        pipeline.settle(fail)
        failures += 1
        if failures % 100 == 0:
            time.sleep(0.001)  # let the sync thread run
    assert opened(), "the fleet did not open"
    return failures


def records(client: Any, fleet: Fleet) -> list[dict[str, Any]]:
    found = []
    for process in fleet.processes:
        raw = client.lrange(f"{fleet.log}:{process.pid}", 0, -1)
        assert raw, f"process {process.pid} left no record"
        found.append(json.loads(raw[0]))
    return found


def first(seen: list[dict[str, Any]], fate: str) -> float:
    return next(entry["t"] for entry in seen if entry["fate"] == fate)


def test_an_opening_in_one_process_rejects_calls_in_the_others(
    redis_server: RedisServer, client: Any, uid: str, fleet_factory: list[Fleet]
) -> None:
    """Four failures here open the fleet's circuit; two other processes reject within the interval."""
    fleet = make_fleet(fleet_factory, redis_server, uid)
    for _ in range(2):
        fleet.start("observe", duration=60)
    fleet.ready(2, client)
    events: list[tuple[float, TelemetryEvent]] = []
    pipeline = member(redis_server, fleet.key, events, break_duration=30)
    client.set(f"{fleet.log}:go", 1)
    fail_until_open(pipeline, lambda: any(event.name == "OnCircuitOpened" for _, event in events))
    opened_at = next(t for t, event in events if event.name == "OnCircuitOpened")
    time.sleep(INTERVAL + MARGIN)
    client.set(f"{fleet.log}:stop", 1)
    fleet.wait()
    latencies = [first(record["seen"], "BrokenCircuitError") - opened_at for record in records(client, fleet)]
    print(f"\nopening seen by the other processes after {[round(x * 1000, 1) for x in latencies]} ms")  # noqa: T201
    assert all(latency < INTERVAL + 0.05 + MARGIN for latency in latencies), latencies
    for record in records(client, fleet):
        after = [entry for entry in record["seen"] if entry["t"] > opened_at + INTERVAL + 0.05 + MARGIN]
        assert all(entry["fate"] == "BrokenCircuitError" for entry in after)


def test_one_probe_at_a_time_for_the_whole_fleet(
    redis_server: RedisServer, client: Any, uid: str, fleet_factory: list[Fleet]
) -> None:
    """Three processes hammer an open circuit whose dependency stays down: probes never overlap."""
    fleet = make_fleet(fleet_factory, redis_server, uid)
    store = RedisCircuitStateStore(client)
    assert store.exchange(fleet.key, CircuitExchange(0, 4, 0.5, 4, 30.0, 0.3, 0, 0, 0, 0, 0.0)).state == 1
    duration = 3.0
    for _ in range(3):
        fleet.start("hammer", duration=duration, break_duration=0.3, hold=0.05)
    fleet.ready(3, client)
    states = {line.split()[1] for line in client.lrange(f"{fleet.log}:ready", 0, -1)}
    assert states <= {"OPEN", "HALF_OPEN"}  # the break is over: one of them may hold the probe already
    client.set(f"{fleet.log}:go", 1)
    fleet.wait()
    calls = sorted(json.loads(line) for line in client.lrange(f"{fleet.log}:dependency", 0, -1))
    print(f"\n{len(calls)} probes in {duration}s from {len({pid for *_, pid in calls})} processes")  # noqa: T201
    assert 3 <= len(calls) <= duration / 0.3 + 1
    for previous, current in itertools.pairwise(calls):
        assert current[0] >= previous[1], f"two probes at once: {previous} and {current}"


def test_an_isolation_from_one_process_holds_every_process(
    redis_server: RedisServer, client: Any, uid: str, fleet_factory: list[Fleet]
) -> None:
    """isolate() here: the others reject with IsolatedCircuitError; close() here: they flow again."""
    fleet = make_fleet(fleet_factory, redis_server, uid)
    for _ in range(2):
        fleet.start("observe", duration=60)
    fleet.ready(2, client)
    control = CircuitBreakerManualControl()
    pipeline = member(redis_server, fleet.key, control=control)
    client.set(f"{fleet.log}:go", 1)
    time.sleep(2 * INTERVAL)
    isolated_at = time.time()
    control.isolate()
    time.sleep(INTERVAL + MARGIN)
    closed_at = time.time()
    control.close()
    time.sleep(INTERVAL + MARGIN)
    client.set(f"{fleet.log}:stop", 1)
    fleet.wait()
    assert pipeline.execute(lambda: "flows") == "flows"
    for record in records(client, fleet):
        seen = record["seen"]
        isolated = first(seen, "IsolatedCircuitError")
        assert isolated - isolated_at < INTERVAL + 0.05 + MARGIN
        assert any(entry["state"] == "ISOLATED" for entry in seen)
        back = [entry for entry in seen if entry["t"] > closed_at and entry["fate"] == "ok"]
        assert back
        assert back[0]["state"] == "CLOSED"
        assert back[0]["t"] - closed_at < INTERVAL + 0.05 + MARGIN


def test_a_redis_restart_keeps_the_fleet_open(
    fresh_redis_server: RedisServer, uid: str, fleet_factory: list[Fleet]
) -> None:
    """Redis loses everything while the circuit is open: no process lets a call through, the state
    is written back, and a process started after the restart learns it is open."""
    server = fresh_redis_server
    client = redis.Redis(port=server.port, decode_responses=True)
    fleet = make_fleet(fleet_factory, server, uid)
    for _ in range(2):
        fleet.start("observe", duration=60, break_duration=30)
    fleet.ready(2, client)
    provider = CircuitBreakerStateProvider()
    pipeline = member(server, fleet.key, provider=provider, break_duration=30)
    client.set(f"{fleet.log}:go", 1)
    fail_until_open(pipeline, lambda: provider.state is CircuitState.OPEN)
    assert client.hget(f"circuit:{fleet.key}", "st") == "1"
    opened_at = time.time()
    # Every process learns of the opening within its sync interval (+ 50 ms, and the margin a
    # loaded machine needs): a call that passed before then is allowed; none may pass after.
    learned_by = opened_at + INTERVAL + 0.05 + MARGIN
    time.sleep(max(0.0, learned_by - time.time()))
    server.restart()  # an empty server on the same port: the circuit's key is gone
    assert client.exists(f"circuit:{fleet.key}") == 0 or client.hget(f"circuit:{fleet.key}", "st") == "1"
    wait_for(lambda: client.hget(f"circuit:{fleet.key}", "st") == "1", timeout=10)
    assert client.pttl(f"circuit:{fleet.key}") > 0
    client.set(f"{fleet.log}:go", 1)  # the restart emptied the server
    late = fleet.start("observe", duration=60, break_duration=30)
    fleet.ready(1, client)  # the restart emptied the list
    assert client.lrange(f"{fleet.log}:ready", -1, -1)[0].split()[1] == "OPEN"
    time.sleep(3 * INTERVAL)
    client.set(f"{fleet.log}:stop", 1)
    fleet.wait()
    assert provider.state is CircuitState.OPEN
    for record in records(client, fleet):
        # A worker records changes only; one that learned of the opening before `learned_by`
        # has nothing after it: then what it saw last before must be rejection.
        seen = record["seen"]
        after = [entry for entry in seen if entry["t"] > learned_by]
        before = [entry for entry in seen if entry["t"] <= learned_by]
        assert after or (before and before[-1]["fate"] == "BrokenCircuitError"), seen
        assert all(entry["fate"] == "BrokenCircuitError" for entry in after), after
    late_record = json.loads(client.lrange(f"{fleet.log}:{late.pid}", 0, -1)[0])
    assert late_record["passed"] == 0
    client.close()


def test_a_run_of_failures_in_one_process_opens_the_consecutive_circuit_for_the_fleet(
    redis_server: RedisServer, client: Any, uid: str, fleet_factory: list[Fleet]
) -> None:
    """Consecutive mode: each process counts its own failures in a row; two observers that only
    succeed do not dilute them, and the opening reaches them within the interval."""
    fleet = make_fleet(fleet_factory, redis_server, uid)
    for _ in range(2):
        fleet.start("observe", duration=60, consecutive=3)
    fleet.ready(2, client)
    events: list[tuple[float, TelemetryEvent]] = []
    telemetry = TelemetryOptions(listeners=[lambda e: events.append((time.time(), e))])
    pipeline = (
        ResiliencePipelineBuilder(name="fleet", telemetry=telemetry)
        .add_circuit_breaker(
            consecutive_failures=3,
            break_duration=30,
            handle=ConnectionError,
            state_store=RedisCircuitStateStore(redis.Redis(port=redis_server.port, socket_timeout=0.5)),
            circuit_key=fleet.key,
            sync_interval=INTERVAL,
        )
        .build()
    )
    client.set(f"{fleet.log}:go", 1)
    time.sleep(0.2)  # the observers' successes flow to the fleet first
    for _ in range(3):
        assert pipeline.settle(fail).error.__class__ is ConnectionError
    assert [event.name for _, event in events if event.name == "OnCircuitOpened"] == ["OnCircuitOpened"]
    opened_at = next(t for t, event in events if event.name == "OnCircuitOpened")
    time.sleep(INTERVAL + MARGIN)
    client.set(f"{fleet.log}:stop", 1)
    fleet.wait()
    latencies = [first(record["seen"], "BrokenCircuitError") - opened_at for record in records(client, fleet)]
    print(f"\nconsecutive opening seen by the other processes after {[round(x * 1000, 1) for x in latencies]} ms")  # noqa: T201
    assert all(latency < INTERVAL + 0.05 + MARGIN for latency in latencies), latencies


def test_a_process_started_while_the_fleet_is_open_rejects_its_first_call(
    redis_server: RedisServer, client: Any, uid: str, fleet_factory: list[Fleet]
) -> None:
    """Three processes start while the fleet's circuit is open: each one's very first call is rejected."""
    fleet = make_fleet(fleet_factory, redis_server, uid)
    provider = CircuitBreakerStateProvider()
    pipeline = member(redis_server, fleet.key, provider=provider, break_duration=60)
    fail_until_open(pipeline, lambda: provider.state is CircuitState.OPEN)
    for _ in range(3):
        fleet.start("first", break_duration=60)
    fleet.wait()
    fates = client.lrange(f"{fleet.log}:first", 0, -1)
    assert fates == ["BrokenCircuitError"] * 3, fates
