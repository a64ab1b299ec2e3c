"""The `requests` adapter against a real local server: the same rules as the httpx transports."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import pytest
import requests
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from resilience import BrokenCircuitError, TimeoutRejectedError
from resilience.http import AuthorityCircuitBreaker, is_transient, standard_hedging_pipeline, standard_pipeline
from resilience.http.requests import ResilientHTTPAdapter
from resilience.strategies import CircuitState
from resilience.telemetry import TelemetryOptions
from resilience.testing import FakeTimeProvider, capture_events
from tests.http.test_telemetry import points
from tests.http_support import Reply, ScriptedServer, free_port

if TYPE_CHECKING:
    from collections.abc import Iterator

    from resilience import ResiliencePipeline
    from resilience.strategies import OnRetryArguments


@pytest.fixture
def sessions() -> Iterator[list[requests.Session]]:
    made: list[requests.Session] = []
    yield made
    for session in made:
        session.close()


def session_with(sessions: list[requests.Session], pipeline: ResiliencePipeline, **options: Any) -> requests.Session:
    session = requests.Session()
    session.mount("http://", ResilientHTTPAdapter(pipeline, **options))
    sessions.append(session)
    return session


def fake(**options: Any) -> ResiliencePipeline:
    return standard_pipeline(time_provider=FakeTimeProvider(auto_advance=True, seed=1), **options)


@pytest.mark.parametrize("status", [408, 429, 500, 502, 503, 504])
def test_each_transient_status_is_retried(
    server: ScriptedServer, sessions: list[requests.Session], status: int
) -> None:
    url = server.script("/flaky", Reply(status), Reply(200, body=b"fine"))
    response = session_with(sessions, fake()).get(url)
    assert (response.status_code, response.content) == (200, b"fine")
    assert len(server.requests_to("/flaky")) == 2


def test_other_statuses_and_a_post_are_returned_at_once(
    server: ScriptedServer, sessions: list[requests.Session]
) -> None:
    session = session_with(sessions, fake())
    assert session.get(server.script("/missing", Reply(404))).status_code == 404
    assert session.post(server.script("/orders", Reply(503), Reply(201)), data=b"{}").status_code == 503
    assert len(server.requests_to("/orders")) == 1  # a POST is not retried...
    keyed = session.post(server.script("/keyed", Reply(503), Reply(201)), headers={"Idempotency-Key": "o-1"})
    assert keyed.status_code == 201  # ...unless the server deduplicates it


def test_retry_after_is_the_delay(server: ScriptedServer, sessions: list[requests.Session]) -> None:
    delays: list[float] = []

    def on_retry(args: OnRetryArguments) -> None:
        delays.append(args.delay)

    url = server.script("/quota", Reply(429, headers={"Retry-After": "7"}), Reply(200))
    assert session_with(sessions, fake(on_retry=on_retry)).get(url).status_code == 200
    assert delays == [7.0]


def test_a_refused_connection_is_retried_then_raised_unchanged(sessions: list[requests.Session]) -> None:
    with capture_events() as events, pytest.raises(requests.exceptions.ConnectionError):
        session_with(sessions, fake()).get(f"http://127.0.0.1:{free_port()}/")
    assert [e.name for e in events].count("OnRetry") == 3


def test_no_connection_leaks_after_many_retried_requests(
    server: ScriptedServer, sessions: list[requests.Session]
) -> None:
    """Each request answered 503 then 200, on a pool of one connection: it is reused throughout."""
    url = server.script("/retried")
    session = session_with(sessions, fake(), pool_maxsize=1, pool_block=True)
    for _ in range(200):
        server.script("/retried", Reply(503), Reply(200))
        assert session.get(url).status_code == 200
    assert server.connections_made == 1
    assert server.open_connections == 1


def test_the_attempt_timeout_cuts_each_attempt(server: ScriptedServer, sessions: list[requests.Session]) -> None:
    """A server that hangs for 30 s: two attempts of 0.3 s each, on the real clock."""
    url = server.script("/hang", default=Reply(delay=30))
    pipeline = standard_pipeline(attempt_timeout=0.3, total_timeout=20, max_retries=1, retry_delay=0.01)
    started = time.monotonic()
    with capture_events() as events, pytest.raises((TimeoutRejectedError, requests.exceptions.Timeout)):
        session_with(sessions, pipeline).get(url, timeout=(5, 25))
    assert time.monotonic() - started < 10
    assert [e.name for e in events if e.strategy_name == "AttemptTimeout"] == ["OnTimeout", "OnTimeout"]


def test_circuits_are_per_authority(
    server: ScriptedServer, other_server: ScriptedServer, sessions: list[requests.Session]
) -> None:
    pipeline = fake(max_retries=0, minimum_throughput=2, failure_ratio=0.5)
    session = session_with(sessions, pipeline)
    bad = server.script("/bad", default=Reply(500))
    session.get(bad)
    session.get(bad)
    with pytest.raises(BrokenCircuitError):
        session.get(bad)
    assert session.get(other_server.script("/good")).status_code == 200
    (circuits,) = [s for s in pipeline.strategies if isinstance(s, AuthorityCircuitBreaker)]
    assert circuits.circuits == {
        f"http://127.0.0.1:{server.port}": CircuitState.OPEN,
        f"http://127.0.0.1:{other_server.port}": CircuitState.CLOSED,
    }


def test_a_slow_response_is_hedged(server: ScriptedServer, sessions: list[requests.Session]) -> None:
    url = server.script("/stuck", Reply(body=b"slow", delay=10), Reply(body=b"fast"))
    session = session_with(sessions, standard_hedging_pipeline(hedging_delay=0.05, attempt_timeout=8))
    started = time.monotonic()
    assert session.get(url).content == b"fast"
    assert time.monotonic() - started < 5.0  # the loser (8 s) is abandoned, not waited for; slack for load


def test_the_returned_response_streams(server: ScriptedServer, sessions: list[requests.Session]) -> None:
    url = server.script("/big", Reply(body=b"x" * 100_000))
    response = session_with(sessions, fake()).get(url, stream=True)
    assert not response._content_consumed
    assert sum(len(chunk) for chunk in response.iter_content(8192)) == 100_000


def test_events_carry_the_http_tags(server: ScriptedServer, sessions: list[requests.Session]) -> None:
    url = server.script("/items/7", Reply(503), Reply(200))
    reader = InMemoryMetricReader()
    pipeline = standard_pipeline(
        name="catalog",
        time_provider=FakeTimeProvider(auto_advance=True),
        telemetry=TelemetryOptions(meter_provider=MeterProvider(metric_readers=[reader])),
    )
    assert session_with(sessions, pipeline).get(url).status_code == 200
    (retry,) = [p for p in points(reader, "resilience.strategy.events") if p["event.name"] == "OnRetry"]
    assert retry["http.request.method"] == "GET"
    assert retry["server.address"] == "127.0.0.1"
    assert retry["server.port"] == server.port
    assert retry["http.response.status_code"] == 503


def test_requests_errors_are_classified() -> None:
    from resilience import Err

    assert is_transient(Err(requests.exceptions.ReadTimeout()))
    assert is_transient(Err(requests.exceptions.ChunkedEncodingError()))
    assert not is_transient(Err(requests.exceptions.SSLError()))
    assert not is_transient(Err(requests.exceptions.InvalidURL()))
    adapter = ResilientHTTPAdapter(standard_pipeline())
    assert "ResilientHTTPAdapter" in repr(adapter)


def test_a_streamed_request_body_is_not_retried(server: ScriptedServer, sessions: list[requests.Session]) -> None:
    """A PUT whose body is a generator: its 503 is the answer, sent once and whole."""
    url = server.script("/upload", Reply(503, body=b"try later"), Reply(200))
    response = session_with(sessions, fake()).put(url, data=(part for part in (b"part one, ", b"part two")))
    assert (response.status_code, response.content) == (503, b"try later")
    assert [seen.body for seen in server.requests_to("/upload")] == [b"part one, part two"]
