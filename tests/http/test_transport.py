"""The resilient transports against a real local server, sync and async alike."""

from __future__ import annotations

import asyncio
import email.utils
import time
from typing import TYPE_CHECKING, Any

import httpx
import pytest

from resilience import BrokenCircuitError, TimeoutRejectedError
from resilience.http import RETRY_EXTENSION, AuthorityCircuitBreaker, standard_pipeline
from resilience.strategies import CircuitState
from resilience.testing import FakeTimeProvider, capture_events
from tests.http.conftest import Client
from tests.http_support import Reply, ScriptedServer, free_port

if TYPE_CHECKING:
    from resilience import ResiliencePipeline
    from resilience.strategies import OnRetryArguments

START = 1_800_000_000.0  # a fake clock that reads like a Unix time (for HTTP-dates)


def fast(delays: list[float] | None = None, **options: Any) -> ResiliencePipeline:
    """The standard pipeline on a fake clock that moves when slept on (no real waiting)."""

    def on_retry(args: OnRetryArguments) -> None:
        if delays is not None:
            delays.append(args.delay)

    options.setdefault("time_provider", FakeTimeProvider(START, auto_advance=True, seed=7))
    return standard_pipeline(on_retry=on_retry, **options)


def make(clients: list[Client], kind: str, pipeline: ResiliencePipeline, **transport: Any) -> Client:
    client = Client(kind, pipeline, **transport)
    clients.append(client)
    return client


@pytest.mark.parametrize("status", [408, 429, 500, 502, 503, 504, 599])
async def test_each_transient_status_is_retried(
    server: ScriptedServer, kind: str, clients: list[Client], status: int
) -> None:
    """408, 429 and every 5xx are retried; the next success is returned."""
    url = server.script("/flaky", Reply(status), Reply(200, body=b"fine"))
    client = make(clients, kind, fast())
    response = await client.request("GET", url)
    assert (response.status_code, response.content) == (200, b"fine")
    assert len(server.requests_to("/flaky")) == 2


@pytest.mark.parametrize("status", [200, 201, 301, 400, 401, 404, 409, 422])
async def test_other_statuses_are_returned_at_once(
    server: ScriptedServer, kind: str, clients: list[Client], status: int
) -> None:
    """Anything else is the answer: no second request."""
    url = server.script("/once", Reply(status, body=b"answer"))
    client = make(clients, kind, fast())
    response = await client.request("GET", url, follow_redirects=False)
    assert response.status_code == status
    assert len(server.requests_to("/once")) == 1


async def test_when_retries_run_out_the_last_response_is_returned(
    server: ScriptedServer, kind: str, clients: list[Client]
) -> None:
    """After max_retries the last handled response is the result, body intact."""
    url = server.script("/down", default=Reply(503, body=b"still down"))
    delays: list[float] = []
    client = make(clients, kind, fast(delays, max_retries=2, retry_delay=0.5))
    response = await client.request("GET", url)
    assert (response.status_code, response.content) == (503, b"still down")
    assert len(server.requests_to("/down")) == 3
    assert len(delays) == 2


async def test_a_dropped_connection_is_retried(server: ScriptedServer, kind: str, clients: list[Client]) -> None:
    """The server hanging up without an answer is a transport error worth retrying."""
    url = server.script("/drop", Reply(drop=True), Reply(200, body=b"back"))
    client = make(clients, kind, fast())
    response = await client.request("GET", url)
    assert response.content == b"back"
    assert len(server.requests_to("/drop")) == 2


async def test_a_transport_error_propagates_unchanged_when_retries_run_out(kind: str, clients: list[Client]) -> None:
    """Nothing listens: each attempt fails to connect; the last ConnectError is raised as is."""
    delays: list[float] = []
    client = make(clients, kind, fast(delays, max_retries=2, retry_delay=0.1))
    with pytest.raises(httpx.ConnectError):
        await client.request("GET", f"http://127.0.0.1:{free_port()}/nobody")
    assert len(delays) == 2


async def test_retry_after_in_seconds_is_the_delay(server: ScriptedServer, kind: str, clients: list[Client]) -> None:
    """`Retry-After: 7` waits 7 s (on the fake clock), not the backoff."""
    url = server.script("/busy", Reply(429, {"Retry-After": "7"}), Reply(200))
    delays: list[float] = []
    clock = FakeTimeProvider(START, auto_advance=True, seed=7)
    client = make(clients, kind, fast(delays, time_provider=clock))
    response = await client.request("GET", url)
    assert response.status_code == 200
    assert delays == [7.0]
    assert clock.monotonic() == pytest.approx(START + 7.0)


async def test_retry_after_as_an_http_date_is_the_delay(
    server: ScriptedServer, kind: str, clients: list[Client]
) -> None:
    """An HTTP-date is read against the time provider's `time()`."""
    when = email.utils.formatdate(START + 20, usegmt=True)
    url = server.script("/maintenance", Reply(503, {"Retry-After": when}), Reply(200))
    delays: list[float] = []
    client = make(clients, kind, fast(delays))
    response = await client.request("GET", url)
    assert response.status_code == 200
    assert delays == [20.0]


async def test_retry_after_is_capped_by_max_delay(server: ScriptedServer, kind: str, clients: list[Client]) -> None:
    """A server asking for an hour gets `max_retry_delay`."""
    url = server.script("/slowdown", Reply(429, {"Retry-After": "3600"}), Reply(200))
    delays: list[float] = []
    client = make(clients, kind, fast(delays, max_retry_delay=5))
    assert (await client.request("GET", url)).status_code == 200
    assert delays == [5.0]


async def test_a_post_is_not_retried(server: ScriptedServer, kind: str, clients: list[Client]) -> None:
    """POST is not idempotent: its 503 is the answer, sent once."""
    url = server.script("/orders", Reply(503), Reply(201))
    client = make(clients, kind, fast())
    response = await client.request("POST", url, json={"item": 1})
    assert response.status_code == 503
    assert [seen.method for seen in server.requests_to("/orders")] == ["POST"]


@pytest.mark.parametrize(
    ("method", "options", "pipeline_options", "sent"),
    [
        ("POST", {"extensions": {RETRY_EXTENSION: True}}, {}, 2),
        ("POST", {"headers": {"Idempotency-Key": "order-42"}}, {}, 2),
        ("PATCH", {}, {"retry_unsafe_methods": True}, 2),
        ("PUT", {}, {}, 2),
        ("DELETE", {}, {}, 2),
        ("PATCH", {}, {}, 1),
        ("GET", {"extensions": {RETRY_EXTENSION: False}}, {}, 1),
    ],
)
async def test_which_requests_may_be_retried(  # noqa: PLR0917 - fixtures and parameters
    server: ScriptedServer,
    kind: str,
    clients: list[Client],
    method: str,
    options: dict[str, Any],
    pipeline_options: dict[str, Any],
    sent: int,
) -> None:
    """Idempotent methods are; others when the request or the pipeline opts in; a request may opt out."""
    url = server.script("/thing", Reply(503), Reply(200))
    client = make(clients, kind, fast(**pipeline_options))
    await client.request(method, url, content=b"payload", **options)
    seen = server.requests_to("/thing")
    assert len(seen) == sent
    assert all(item.body == b"payload" for item in seen)  # a retried request sends its body again


async def test_a_discarded_response_is_closed_before_the_next_attempt(
    server: ScriptedServer, kind: str, clients: list[Client]
) -> None:
    """With a pool of one connection, a retry can only go out if the 503 gave it back."""
    url = server.script("/one", Reply(503, body=b"x" * 1000), Reply(503), Reply(200))
    limits = httpx.Limits(max_connections=1)
    client = make(clients, kind, fast(), limits=limits)
    response = await client.request("GET", url, timeout=httpx.Timeout(5.0, pool=1.0))
    assert response.status_code == 200
    assert len(server.requests_to("/one")) == 3
    assert server.connections_made == 1  # small bodies are drained: the connection is reused


async def test_no_connection_leaks_after_1000_retried_requests(
    server: ScriptedServer, kind: str, clients: list[Client]
) -> None:
    """1,000 requests, each answered 503 then 200: the pool ends with one idle connection."""
    replies = [reply for _ in range(1000) for reply in (Reply(503, body=b"busy"), Reply(200, body=b"ok"))]
    url = server.script("/load", *replies)
    client = make(clients, kind, fast())
    for _ in range(1000):
        response = await client.request("GET", url)
        assert response.status_code == 200
    assert len(server.requests_to("/load")) == 2000
    connections = client.pool.connections
    assert len(connections) == 1
    assert all(connection.is_idle() for connection in connections)
    assert server.open_connections <= 1
    await client.close()
    deadline = time.monotonic() + 10
    while server.open_connections and time.monotonic() < deadline:
        await asyncio.sleep(0.01)
    assert server.open_connections == 0


async def test_a_large_discarded_body_closes_its_connection(
    server: ScriptedServer, kind: str, clients: list[Client]
) -> None:
    """A body too big to drain is not read: its connection is closed instead, none leaks."""
    url = server.script("/big", Reply(503, body=b"x" * 200_000), Reply(200))
    client = make(clients, kind, fast())
    assert (await client.request("GET", url)).status_code == 200
    assert server.connections_made == 2
    assert len(client.pool.connections) == 1


async def test_the_returned_response_is_streamed_not_buffered(
    server: ScriptedServer, kind: str, clients: list[Client]
) -> None:
    """`client.stream(...)` gets the body unread from the transport."""
    body = bytes(range(256)) * 4096
    url = server.script("/file", Reply(503), Reply(200, body=body))
    client = make(clients, kind, fast())
    if kind == "sync":
        with client.sync.stream("GET", url) as response:
            assert not response.is_stream_consumed
            received = b"".join(response.iter_bytes(65536))
    else:
        async with client.asyncc.stream("GET", url) as response:
            assert not response.is_stream_consumed
            received = b"".join([chunk async for chunk in response.aiter_bytes(65536)])
    assert received == body


async def test_circuits_are_per_authority(
    server: ScriptedServer, other_server: ScriptedServer, kind: str, clients: list[Client]
) -> None:
    """Failures of one host open its circuit only; a POST's 5xx counts too (it is just not retried)."""
    failing = server.script("/api", default=Reply(500))
    healthy = other_server.script("/api", default=Reply(200))
    pipeline = fast(max_retries=0, minimum_throughput=2, failure_ratio=0.5)
    client = make(clients, kind, pipeline)
    assert (await client.request("POST", failing)).status_code == 500
    assert (await client.request("GET", failing)).status_code == 500
    with pytest.raises(BrokenCircuitError):
        await client.request("GET", failing)
    assert len(server.requests_to("/api")) == 2
    for _ in range(3):
        assert (await client.request("GET", healthy)).status_code == 200
    circuits = next(s for s in pipeline.strategies if isinstance(s, AuthorityCircuitBreaker)).circuits
    assert circuits == {
        f"http://127.0.0.1:{server.port}": CircuitState.OPEN,
        f"http://127.0.0.1:{other_server.port}": CircuitState.CLOSED,
    }


async def test_the_attempt_deadline_is_handed_to_httpx(
    server: ScriptedServer, kind: str, clients: list[Client]
) -> None:
    """Each attempt's timeouts are the time left before the nearest deadline, or the client's if shorter."""
    url = server.script("/quick", Reply(200))
    client = make(clients, kind, fast(attempt_timeout=3, total_timeout=60))
    response = await client.request("GET", url, timeout=httpx.Timeout(10.0, connect=1.0))
    timeouts = response.request.extensions["timeout"]
    assert timeouts == {"connect": 1.0, "read": 3.0, "write": 3.0, "pool": 3.0}


async def test_an_attempt_timeout_cuts_each_attempt_and_retries(
    server: ScriptedServer, kind: str, clients: list[Client]
) -> None:
    """A server that hangs for 30 s: two attempts of 0.3 s each, on the real clock."""
    url = server.script("/hang", default=Reply(delay=30))
    client = make(
        clients, kind, standard_pipeline(attempt_timeout=0.3, total_timeout=20, max_retries=1, retry_delay=0.01)
    )
    started = time.monotonic()
    with capture_events() as events, pytest.raises((TimeoutRejectedError, httpx.TimeoutException)):
        await client.request("GET", url)
    assert time.monotonic() - started < 10  # far less than the server's 30 s
    # Two attempts, each cut by its own timeout. Counted from the events, not the server's log:
    # on a loaded machine an attempt may be cut before its request even reached the server.
    assert [e.name for e in events if e.strategy_name == "AttemptTimeout"] == ["OnTimeout", "OnTimeout"]
    assert 1 <= len(server.requests_to("/hang")) <= 2


async def test_the_total_timeout_cuts_the_request_and_stops_retrying(
    server: ScriptedServer, kind: str, clients: list[Client]
) -> None:
    """A total timeout shorter than the attempt timeout ends the one attempt and every retry."""
    url = server.script("/hang", default=Reply(delay=30))
    client = make(clients, kind, standard_pipeline(attempt_timeout=10, total_timeout=0.4, retry_delay=0.01))
    started = time.monotonic()
    with pytest.raises((TimeoutRejectedError, httpx.TimeoutException)):
        await client.request("GET", url)
    assert time.monotonic() - started < 10
    assert len(server.requests_to("/hang")) == 1
