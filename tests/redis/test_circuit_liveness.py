"""A shared circuit stays alive: it recovers under sparse traffic, survives a hung or flushed
Redis, keeps its failures when it falls back to local state, and never lets a stale control
or a one-loop-per-call program defeat it. Real Redis, one process (the fleet-wide proofs are in
tests/reliability/test_fleet_circuit.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import threading
import time
import uuid
from typing import TYPE_CHECKING, Any

import pytest
import redis
import redis.asyncio

from resilience import BrokenCircuitError, ResiliencePipeline
from resilience.stores import RedisCircuitStateStore
from resilience.stores._redis_circuit import CircuitExchange
from resilience.strategies import CircuitBreakerManualControl, CircuitBreakerStateProvider, CircuitState
from resilience.strategies.circuit._fleet import SharedCircuitCore
from resilience.testing import capture_events
from tests.redis.test_circuit_sync import fail, shared, until

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Iterator

    from tests.redis_support import RedisServer

pytestmark = pytest.mark.redis


@pytest.fixture
def key() -> str:
    return f"live-{uuid.uuid4().hex[:10]}"


@pytest.fixture
def client(redis_server: RedisServer) -> Iterator[Any]:
    connection = redis.Redis(port=redis_server.port, socket_timeout=2)
    yield connection
    connection.close()


def open_it(pipeline: ResiliencePipeline, provider: CircuitBreakerStateProvider) -> None:
    for _ in range(4):
        pipeline.settle(fail)
    until(lambda: provider.state is CircuitState.OPEN)


@pytest.mark.parametrize("gap", [1.0, 5.0])
def test_sparse_calls_after_the_break_probe_and_close(client: Any, key: str, gap: float) -> None:
    """Calls `gap` seconds apart after a 0.3 s break: the first one is the probe and closes it."""
    provider = CircuitBreakerStateProvider()
    pipeline = shared(RedisCircuitStateStore(client), key, provider=provider)
    open_it(pipeline, provider)
    time.sleep(gap)
    outcome = pipeline.settle(lambda: "recovered")
    assert outcome.is_ok, outcome
    assert provider.state is CircuitState.CLOSED
    until(lambda: client.hget(f"circuit:{key}", "st") == b"0")  # closed for the fleet too


def test_the_first_call_after_the_break_is_the_probe(client: Any, key: str) -> None:
    """As a local circuit: a call a moment after the break's end goes through as the probe."""
    provider = CircuitBreakerStateProvider()
    pipeline = shared(RedisCircuitStateStore(client), key, provider=provider, brk=0.5)
    open_it(pipeline, provider)
    with pytest.raises(BrokenCircuitError):
        pipeline.execute(lambda: "rejected")  # within the break
    time.sleep(0.5 + 0.05)  # the break, and one sync interval of slack
    assert pipeline.execute(lambda: "probe") == "probe"
    assert provider.state is CircuitState.CLOSED


@contextlib.contextmanager
def frozen(server: RedisServer) -> Iterator[None]:
    """The server stopped with SIGSTOP (it accepts nothing, answers nothing) until the block ends."""
    pid = server._process.pid  # type: ignore[union-attr]
    os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(pid, signal.SIGCONT)


# 5 s: well beyond the watchdog (1 s), so that a loaded machine's lateness (a 3.5 s opening was
# seen with two test suites running) still tells the watchdog from the socket timeout.
@pytest.mark.parametrize("socket_timeout", [None, 5.0])
def test_a_hung_redis_puts_every_circuit_of_the_store_on_local_state(
    fresh_redis_server: RedisServer, socket_timeout: float | None
) -> None:
    """SIGSTOP, a client without socket timeout (as the quick start builds it) or with one longer
    than the watchdog: each of five circuits goes local and opens on its own rule within
    `max(1 s, 10 x sync_interval)` (+ slack), with one event each."""
    client = redis.Redis(port=fresh_redis_server.port, socket_timeout=socket_timeout)
    store = RedisCircuitStateStore(client)
    keys = [f"hung-{n}-{uuid.uuid4().hex[:6]}" for n in range(5)]
    providers = [CircuitBreakerStateProvider() for _ in keys]
    with capture_events() as events:
        pipelines = [shared(store, key, provider=provider) for key, provider in zip(keys, providers, strict=True)]
        time.sleep(0.2)
        with frozen(fresh_redis_server):
            start = time.monotonic()

            def all_open() -> bool:
                for pipeline in pipelines:
                    pipeline.settle(fail)
                time.sleep(0.01)
                return all(provider.state is CircuitState.OPEN for provider in providers)

            waited = until(all_open, timeout=8)
            print(f"\nfive circuits open {waited:.2f}s after the hang")  # noqa: T201
            assert waited < 1.0 + 3.0, waited  # stall_after (1 s) and slack for a loaded machine
            assert time.monotonic() - start < 4.5
        failed = {event.arguments.circuit_key for event in events if event.name == "OnCircuitStateSyncFailed"}  # type: ignore[union-attr]
    assert set(keys) <= failed
    with contextlib.suppress(Exception):
        client.connection_pool.disconnect()


def test_failures_counted_before_the_first_failed_sync_open_the_local_circuit() -> None:
    """Redis unreachable from the start: `minimum_throughput` handled failures open the circuit."""
    with socket.socket() as closed_port:
        closed_port.bind(("127.0.0.1", 0))
        port = closed_port.getsockname()[1]
    client = redis.Redis(port=port, socket_connect_timeout=0.2)
    provider = CircuitBreakerStateProvider()
    with capture_events() as events:
        down = f"down-{uuid.uuid4().hex[:6]}"
        pipeline = shared(RedisCircuitStateStore(client), down, provider=provider)
        for _ in range(4):
            pipeline.settle(fail)
        until(lambda: any(getattr(event.arguments, "circuit_key", None) == down for event in events))
        until(lambda: provider.state is CircuitState.OPEN, timeout=2)
    with pytest.raises(BrokenCircuitError):
        pipeline.execute(lambda: "rejected")


def test_a_circuit_built_while_the_fleet_is_open_rejects_its_first_call(client: Any, key: str) -> None:
    """A new member learns the fleet's state when it is built: no call passes an open circuit."""
    provider = CircuitBreakerStateProvider()
    opener = shared(RedisCircuitStateStore(client), key, provider=provider, brk=30)
    open_it(opener, provider)
    for _ in range(5):
        newcomer = shared(RedisCircuitStateStore(client), key, brk=30)
        with pytest.raises(BrokenCircuitError):
            newcomer.execute(lambda: "passed an open circuit")


def test_build_returns_only_once_the_first_answer_is_applied(
    client: Any, key: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first answer is applied before `build()` returns, however long applying it takes (a
    loaded machine can pause the sync's thread between hearing the answer and applying it)."""
    provider = CircuitBreakerStateProvider()
    opener = shared(RedisCircuitStateStore(client), key, provider=provider, brk=30)
    open_it(opener, provider)
    apply = SharedCircuitCore.apply

    def slow_apply(core: SharedCircuitCore, *args: Any, **kwargs: Any) -> Any:
        time.sleep(0.2)  # the pause, made long
        return apply(core, *args, **kwargs)

    monkeypatch.setattr(SharedCircuitCore, "apply", slow_apply)
    newcomer = shared(RedisCircuitStateStore(client), key, brk=30)
    with pytest.raises(BrokenCircuitError):
        newcomer.execute(lambda: "passed an open circuit")


@pytest.mark.parametrize("loss", ["flushall", "restart"])
def test_losing_redis_during_a_probe_never_leaves_a_process_unable_to_open(
    fresh_redis_server: RedisServer, key: str, loss: str
) -> None:
    """The store loses the circuit while our probe runs: afterwards failures open it again
    within one `sampling_duration` (+ slack), for this process and in the store."""
    sampling = 1.0
    client = redis.Redis(port=fresh_redis_server.port, socket_timeout=0.5, socket_connect_timeout=0.5)
    provider = CircuitBreakerStateProvider()
    pipeline = shared(RedisCircuitStateStore(client), key, provider=provider, sampling=sampling)
    open_it(pipeline, provider)
    time.sleep(0.3 + 0.05)

    def probe() -> str:
        getattr(fresh_redis_server, loss)()
        time.sleep(0.3)  # several syncs while half-open, against the emptied store
        return "recovered"

    until(lambda: pipeline.settle(probe).is_ok)  # the probe (the first call here, see above)
    assert provider.state is CircuitState.CLOSED
    start = time.monotonic()

    def opened() -> bool:
        pipeline.settle(fail)
        time.sleep(0.01)
        return provider.state is CircuitState.OPEN and client.hget(f"circuit:{key}", "st") == b"1"

    waited = until(opened, timeout=10)
    assert waited < sampling + 1.0, waited
    assert time.monotonic() - start < sampling + 1.0
    client.close()


def test_a_control_follows_a_close_made_elsewhere_and_a_rebuild_does_not_isolate_again(client: Any, key: str) -> None:
    """A isolates, B closes: A's control is no longer isolated, and a pipeline A builds with it
    starts closed and leaves the fleet closed."""
    control_a, control_b = CircuitBreakerManualControl(), CircuitBreakerManualControl()
    provider_a, provider_b = CircuitBreakerStateProvider(), CircuitBreakerStateProvider()
    shared(RedisCircuitStateStore(client), key, control=control_a, provider=provider_a)
    shared(RedisCircuitStateStore(client), key, control=control_b, provider=provider_b)
    control_a.isolate()
    until(lambda: provider_b.state is CircuitState.ISOLATED)
    assert control_b.is_isolated  # B's control shows the fleet's isolation too
    control_b.close()
    until(lambda: provider_a.state is CircuitState.CLOSED)
    until(lambda: not control_a.is_isolated, timeout=1)
    provider = CircuitBreakerStateProvider()
    rebuilt = shared(RedisCircuitStateStore(client), key, control=control_a, provider=provider)
    assert provider.state is CircuitState.CLOSED
    time.sleep(0.2)  # a few syncs
    assert client.hget(f"circuit:{key}", "st") == b"0"
    assert provider_b.state is CircuitState.CLOSED
    assert rebuilt.execute(lambda: "flows") == "flows"


def bounded_run(job: Callable[[], Awaitable[object]], timeout: float = 10.0) -> object:
    """`asyncio.run(job())` in a thread; fails if it has not returned within `timeout`."""
    result: list[object] = []
    thread = threading.Thread(target=lambda: result.append(asyncio.run(job())), daemon=True)  # type: ignore[arg-type]
    thread.start()
    thread.join(timeout)
    assert not thread.is_alive(), "asyncio.run() did not return"
    return result[0]


@pytest.mark.parametrize("hold", [0.0, 0.15])
def test_one_event_loop_per_call_syncs_and_every_run_returns(redis_server: RedisServer, key: str, hold: float) -> None:
    """A CLI's `asyncio.run` per job with an asyncio-only store (a client factory): fast or slow
    calls, the fleet's circuit opens on their failures, no exchange fails, and every run returns."""

    async def failing() -> None:
        await asyncio.sleep(hold)
        raise ConnectionError("dependency down")

    store = RedisCircuitStateStore(async_client=lambda: redis.asyncio.Redis(port=redis_server.port))
    provider = CircuitBreakerStateProvider()
    # A break longer than the eight runs: on a loaded machine a run can outlast a short break, and
    # the last call would then be the half-open probe (a ConnectionError), not a rejection.
    pipeline = shared(store, key, provider=provider, brk=30.0)
    with capture_events() as events:
        fates = [type(bounded_run(lambda: pipeline.settle_async(failing)).error).__name__ for _ in range(8)]  # type: ignore[attr-defined]
    assert fates[:4] == ["ConnectionError"] * 4
    assert fates[-1] == "BrokenCircuitError", fates
    assert provider.state is CircuitState.OPEN
    check = redis.Redis(port=redis_server.port)
    assert check.hget(f"circuit:{key}", "st") == b"1"  # opened for the fleet, not only here
    check.close()
    # Only this test's circuit: circuits of earlier tests may still be syncing with servers that are gone.
    failed = [
        event
        for event in events
        if event.name == "OnCircuitStateSyncFailed" and event.arguments.circuit_key == key  # type: ignore[union-attr]
    ]
    assert not failed, [event.arguments.error for event in failed]  # type: ignore[union-attr]


async def test_an_asyncio_circuit_learns_the_fleets_state_before_its_first_call(
    redis_server: RedisServer, client: Any, key: str
) -> None:
    """Asyncio-only store: the first call on the loop waits for the first exchange, so it is
    rejected by an open fleet circuit; and after the break the first call is the probe."""
    opened = RedisCircuitStateStore(client).exchange(key, CircuitExchange(0, 4, 0.5, 4, 30.0, 0.3, 0, 0, 0, 0, 0.0))
    assert opened.state == 1  # open for 0.3 s, by no member of the fleet that is still alive
    async_client = redis.asyncio.Redis(port=redis_server.port)
    store = RedisCircuitStateStore(async_client=async_client)
    newcomer_provider = CircuitBreakerStateProvider()
    newcomer = shared(store, key, provider=newcomer_provider)

    async def call() -> str:
        return "probe"

    with pytest.raises(BrokenCircuitError):
        await newcomer.execute_async(call)
    await asyncio.sleep(1.0)  # calls far apart after the break
    assert await newcomer.execute_async(call) == "probe"
    assert newcomer_provider.state is CircuitState.CLOSED
    await store.aclose()
    await async_client.aclose()


def test_an_idle_member_cannot_keep_the_probe_from_a_member_with_calls(client: Any, key: str) -> None:
    """Two members, the one holding the probe never called: the other, calling every 0.5 s, gets
    the probe within a few calls (the first one asks for it; on a quiet machine the second is
    the probe, but a sync thread starved by load may let an unused grant lapse and claim again).
    A holder that kept the probe from a member with calls would fail every one of them."""
    RedisCircuitStateStore(client).exchange(key, CircuitExchange(0, 4, 0.5, 4, 30.0, 0.3, 0, 0, 0, 0, 0.0))
    idle = shared(RedisCircuitStateStore(client), key)  # a store of its own: another member
    until(lambda: client.hget(f"circuit:{key}", "st") == b"2")  # the idle member claimed the probe
    provider = CircuitBreakerStateProvider()
    busy = shared(RedisCircuitStateStore(client), key, provider=provider)
    assert provider.state is CircuitState.HALF_OPEN  # someone else's probe
    fates: list[str] = []
    for _ in range(8):
        time.sleep(0.5)
        outcome = busy.settle(lambda: "probe")
        fates.append("ok" if outcome.is_ok else type(outcome.error).__name__)  # type: ignore[attr-defined]
        if outcome.is_ok:
            break
    assert fates[-1] == "ok", fates
    assert set(fates[:-1]) <= {"BrokenCircuitError"}, fates  # a miss is a rejection, nothing else
    assert provider.state is CircuitState.CLOSED
    until(lambda: idle.settle(lambda: "flows").is_ok, timeout=2)  # the fleet's close reaches it
