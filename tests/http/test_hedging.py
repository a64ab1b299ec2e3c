"""`standard_hedging_pipeline` and `http_hedging_strategy` against a real local server, sync and async."""

from __future__ import annotations

import asyncio
import time
from concurrent.futures import Future
from typing import TYPE_CHECKING

import httpx
import pytest

from resilience import PipelineBuilder, RateLimiterRejectedError, ValidationError
from resilience.http import (
    RETRY_EXTENSION,
    AuthorityCircuitBreaker,
    HttpHedging,
    http_hedging_strategy,
    is_hedgeable,
    standard_hedging_pipeline,
)
from resilience.http._transport import _send_into
from resilience.strategies import CircuitState
from resilience.strategies.limiting._concurrency import ConcurrencyLimiterStrategy
from resilience.testing import capture_events
from tests.http.conftest import Client
from tests.http_support import Reply, ScriptedServer

if TYPE_CHECKING:
    from resilience import ResiliencePipeline


async def settled(client: Client, server: ScriptedServer, *, within: float = 3.0) -> None:
    """Wait until no connection of the client is busy and the server finished every request."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        busy = [c for c in client.pool.connections if not (c.is_idle() or c.is_closed())]
        idle = [c for c in client.pool.connections if c.is_idle()]
        if not busy and server.open_connections == len(idle):
            return
        await asyncio.sleep(0.02)
    pytest.fail(f"still busy: {client.pool.connections}, server has {server.open_connections} open")


async def closed_on_the_server(server: ScriptedServer, *, within: float = 2.0) -> None:
    deadline = time.monotonic() + within
    while server.open_connections and time.monotonic() < deadline:
        await asyncio.sleep(0.02)
    assert server.open_connections == 0


def quick(**options: object) -> ResiliencePipeline:
    return standard_hedging_pipeline(hedging_delay=0.05, attempt_timeout=2.0, **options)  # type: ignore[arg-type]


async def test_a_slow_response_is_hedged_and_the_winner_not_held_back(
    server: ScriptedServer, kind: str, clients: list[Client]
) -> None:
    """The second attempt answers first and is returned at once, while the first still waits."""
    url = server.script("/stuck", Reply(body=b"slow", delay=10), Reply(body=b"fast"))
    client = Client(kind, standard_hedging_pipeline(hedging_delay=0.05, attempt_timeout=8))
    clients.append(client)
    with capture_events() as events:
        started = time.monotonic()
        response = await client.request("GET", url)
        elapsed = time.monotonic() - started
    assert response.content == b"fast"
    # Waiting for the loser would take its attempt timeout (8 s): a sync read cannot be
    # interrupted, so the sync attempt is abandoned instead (async: cancelled). 5 s leaves a
    # loaded machine room for the winner's round trip.
    assert elapsed < 5.0
    assert len(server.requests_to("/stuck")) == 2
    assert [e.name for e in events].count("OnHedging") == 1


async def test_the_losers_late_response_is_closed(server: ScriptedServer, kind: str, clients: list[Client]) -> None:
    """The first attempt's response arrives after the race: closed (sync) or never read (async); no leak."""
    url = server.script("/slow", Reply(body=b"slow", delay=0.5), Reply(body=b"fast"))
    client = Client(kind, quick())
    clients.append(client)
    await client.request("GET", url)
    assert len(server.requests_to("/slow")) == 2
    await settled(client, server)  # no connection left busy: the late response was closed
    await client.close()
    await closed_on_the_server(server)


async def test_a_transient_failure_is_hedged_at_once(server: ScriptedServer, kind: str, clients: list[Client]) -> None:
    """A 503 does not wait for the hedging delay; the 503 response is closed."""
    url = server.script("/flaky", Reply(503, body=b"down"), Reply(200, body=b"up"))
    client = Client(kind, standard_hedging_pipeline(hedging_delay=30))
    clients.append(client)
    started = time.monotonic()
    response = await client.request("GET", url)
    assert response.content == b"up"
    assert time.monotonic() - started < 5
    await settled(client, server)
    assert len(client.pool.connections) == 1  # the 503 gave its connection back to the pool


async def test_when_every_attempt_fails_the_last_response_is_returned(
    server: ScriptedServer, kind: str, clients: list[Client]
) -> None:
    url = server.script("/down", Reply(503, body=b"first"), Reply(502, body=b"second"))
    client = Client(kind, standard_hedging_pipeline(hedging_delay=30))
    clients.append(client)
    response = await client.request("GET", url)
    assert (response.status_code, response.content) == (502, b"second")
    await settled(client, server)


@pytest.mark.parametrize(
    ("method", "extensions", "headers", "sent"),
    [
        ("POST", {}, {}, 1),
        ("PATCH", {}, {}, 1),
        ("POST", {RETRY_EXTENSION: True}, {}, 2),
        ("POST", {}, {"Idempotency-Key": "k1"}, 2),
        ("GET", {RETRY_EXTENSION: False}, {}, 1),
        ("PUT", {}, {}, 2),
    ],
)
async def test_only_requests_safe_to_repeat_are_hedged(  # noqa: PLR0917 - fixtures and parameters
    server: ScriptedServer,
    kind: str,
    clients: list[Client],
    method: str,
    extensions: dict[str, object],
    headers: dict[str, str],
    sent: int,
) -> None:
    url = server.script("/orders", Reply(503), default=Reply(201))
    client = Client(kind, standard_hedging_pipeline(hedging_delay=30))
    clients.append(client)
    response = await client.request(method, url, extensions=extensions, headers=headers, content=b"{}")
    assert response.status_code == (503 if sent == 1 else 201)
    assert len(server.requests_to("/orders")) == sent
    assert all(seen.body == b"{}" for seen in server.requests_to("/orders"))  # the body is sent again


async def test_hedge_unsafe_methods_hedges_a_post(server: ScriptedServer, kind: str, clients: list[Client]) -> None:
    url = server.script("/pay", Reply(503), Reply(201))
    client = Client(kind, standard_hedging_pipeline(hedging_delay=30, hedge_unsafe_methods=True))
    clients.append(client)
    assert (await client.request("POST", url)).status_code == 201
    assert len(server.requests_to("/pay")) == 2


async def test_the_attempt_timeout_cuts_each_attempt(server: ScriptedServer, kind: str, clients: list[Client]) -> None:
    """Both attempts stall: each is cut at its own deadline, and the last timeout is raised."""
    from resilience import TimeoutRejectedError

    url = server.script("/stall", Reply(delay=10), Reply(delay=10))
    client = Client(kind, standard_hedging_pipeline(hedging_delay=0.1, attempt_timeout=0.3))
    clients.append(client)
    started = time.monotonic()
    with capture_events() as events, pytest.raises(TimeoutRejectedError):
        await client.request("GET", url)
    assert time.monotonic() - started < 5  # 0.1 + 0.3 and slack for load, far from the server's 10 s
    # Counted from the events: on a loaded machine an attempt may be cut before reaching the server.
    assert [e.name for e in events if e.strategy_name == "AttemptTimeout"] == ["OnTimeout", "OnTimeout"]


async def test_the_total_timeout_bounds_every_attempt(server: ScriptedServer, kind: str, clients: list[Client]) -> None:
    from resilience import TimeoutRejectedError

    url = server.script("/stall", Reply(delay=10), Reply(delay=10))
    client = Client(kind, standard_hedging_pipeline(hedging_delay=0.1, total_timeout=0.3))
    clients.append(client)
    started = time.monotonic()
    with pytest.raises(TimeoutRejectedError):
        await client.request("GET", url)
    assert time.monotonic() - started < 5  # far from the server's 10 s


async def test_the_endpoint_limiter_is_per_authority_and_a_refused_hedge_does_not_win(
    server: ScriptedServer, other_server: ScriptedServer, kind: str, clients: list[Client]
) -> None:
    """One attempt in flight per authority: the hedge to the same host is refused, attempt 0 still answers."""
    url = server.script("/one", Reply(body=b"slow", delay=1.2))
    client = Client(kind, quick(max_concurrency=1))
    clients.append(client)
    first = asyncio.ensure_future(client.request("GET", url))
    await asyncio.sleep(0.3)
    # Another authority has its own permit.
    assert (await client.request("GET", other_server.script("/two", Reply(body=b"other")))).content == b"other"
    with pytest.raises(RateLimiterRejectedError):  # the same authority's single permit is taken
        await client.request("GET", server.script("/three"))
    assert (await first).content == b"slow"  # its hedge was refused: that is not an answer
    assert len(server.requests_to("/one")) == 1


async def test_an_open_circuit_is_per_authority(
    server: ScriptedServer, other_server: ScriptedServer, kind: str, clients: list[Client]
) -> None:
    from resilience import BrokenCircuitError

    pipeline = standard_hedging_pipeline(hedging_delay=30, minimum_throughput=2, failure_ratio=0.5)
    client = Client(kind, pipeline)
    clients.append(client)
    bad = server.script("/bad", default=Reply(500))
    assert (await client.request("GET", bad)).status_code == 500  # two attempts, two failures: open
    with pytest.raises(BrokenCircuitError):
        await client.request("GET", bad)
    assert len(server.requests_to("/bad")) == 2
    assert (await client.request("GET", other_server.script("/good"))).status_code == 200
    (circuits,) = [s for s in pipeline.strategies if isinstance(s, AuthorityCircuitBreaker)]
    assert sorted(circuits.circuits.values(), key=str) == sorted([CircuitState.OPEN, CircuitState.CLOSED], key=str)


def test_the_pipeline_is_dotnets_standard_hedging_handler() -> None:
    pipeline = standard_hedging_pipeline(name="search")
    kinds = [type(s).__name__ for s in pipeline.strategies]
    assert kinds == [
        "DeadlineTimeout",
        "HttpHedging",
        "ConcurrencyLimiterStrategy",
        "AuthorityCircuitBreaker",
        "DeadlineTimeout",
    ]
    assert "max_hedged_attempts=1 delay=2" in repr(pipeline.strategies[1])
    limiter = pipeline.strategies[2]
    assert isinstance(limiter, ConcurrencyLimiterStrategy)
    assert "limit=1000" in repr(limiter)
    assert "timeout=30" in repr(pipeline.strategies[0])
    assert "timeout=10" in repr(pipeline.strategies[4])
    unlimited = standard_hedging_pipeline(max_concurrency=None)
    assert [type(s).__name__ for s in unlimited.strategies][2] == "AuthorityCircuitBreaker"


def test_every_bad_option_is_reported_at_once() -> None:
    with pytest.raises(ValidationError) as caught:
        standard_hedging_pipeline(
            max_hedged_attempts=11,
            hedging_delay=-1,
            hedge_unsafe_methods="yes",  # type: ignore[arg-type]
            attempt_timeout=0,
            failure_ratio=2,
        )
    message = str(caught.value)
    for option in (
        "Hedging.max_hedged_attempts",
        "Hedging.delay",
        "Hedging.hedge_unsafe_methods",
        "AttemptTimeout.timeout",
        "CircuitBreaker.failure_ratio",
    ):
        assert option in message


def test_the_hedging_predicate() -> None:
    from resilience import BrokenCircuitError, Err, Ok

    assert is_hedgeable(Ok(httpx.Response(503)))
    assert is_hedgeable(Err(httpx.ConnectError("refused")))
    assert is_hedgeable(Err(BrokenCircuitError("open")))
    assert is_hedgeable(Err(RateLimiterRejectedError("full")))
    assert not is_hedgeable(Ok(httpx.Response(404)))
    assert not is_hedgeable(Err(ValueError("a bug")))


async def test_the_strategy_composes_and_runs_outside_a_transport() -> None:
    """Without a request (a plain callable) the strategy hedges: nothing says it must not."""
    pipeline = PipelineBuilder().add(http_hedging_strategy(delay=30, handle=lambda o: o.value == "bad")).build()
    assert isinstance(pipeline.strategies[0], HttpHedging)
    answers = iter(["bad", "good"])
    assert pipeline.execute(lambda: next(answers)) == "good"
    answers = iter(["bad", "good"])

    async def call() -> str:
        return next(answers)

    assert await pipeline.execute_async(call) == "good"


def test_an_abandoned_send_discards_its_late_response() -> None:
    """The sender side of an abandoned sync attempt: the response arriving afterwards is closed."""
    response = httpx.Response(200, content=b"late")
    transport = httpx.MockTransport(lambda request: response)
    answer: Future[httpx.Response] = Future()
    assert answer.cancel()  # the attempt gave up: the sender owns whatever comes
    _send_into(answer, lambda: transport.handle_request(httpx.Request("GET", "https://example.com/")))
    assert response.is_closed
