"""Edges of the resilient transports against a real local server: delays that outlast every
deadline, one-shot request bodies, many authorities. Sync and async alike."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import httpx
import pytest

from resilience import ResiliencePipelineBuilder, TimeoutRejectedError
from resilience._validation import MAX_DURATION
from resilience.http import (
    RETRY_EXTENSION,
    AuthorityCircuitBreaker,
    http_circuit_breaker_strategy,
    http_retry_strategy,
    standard_hedging_pipeline,
    standard_pipeline,
)
from resilience.testing import FakeTimeProvider, capture_events
from tests.http.conftest import Client
from tests.http_support import Reply, ScriptedServer

if TYPE_CHECKING:
    from resilience import ResiliencePipeline
    from resilience.strategies import OnRetryArguments

START = 1_800_000_000.0


def make(clients: list[Client], kind: str, pipeline: ResiliencePipeline) -> Client:
    client = Client(kind, pipeline)
    clients.append(client)
    return client


# -- delays beyond every bound ----------------------------------------------------------------


@pytest.mark.parametrize("retry_after", ["1e10", "1e308", "Fri, 31 Dec 9999 23:59:59 GMT"])
async def test_a_huge_retry_after_returns_the_response_within_the_total_timeout(
    server: ScriptedServer, kind: str, clients: list[Client], retry_after: str
) -> None:
    """The server asks for centuries: the 503 comes back at once, readable, sent once."""
    url = server.script("/later", default=Reply(503, {"Retry-After": retry_after}, body=b"come back"))
    client = make(clients, kind, standard_pipeline(total_timeout=5, attempt_timeout=4))
    started = time.monotonic()
    response = await client.request("GET", url)
    assert (response.status_code, response.content) == (503, b"come back")
    assert time.monotonic() - started < 4  # not the total timeout: nothing to wait for
    assert len(server.requests_to("/later")) == 1


async def test_a_huge_retry_after_without_a_deadline_is_capped_to_the_longest_duration(
    server: ScriptedServer, kind: str, clients: list[Client]
) -> None:
    """With no timeout around it, the HTTP retry waits at most `MAX_DURATION` (fake clock)."""
    url = server.script("/later", Reply(503, {"Retry-After": "1e308"}), Reply(200))
    delays: list[float] = []
    clock = FakeTimeProvider(START, auto_advance=True)
    pipeline = (
        ResiliencePipelineBuilder(time_provider=clock)
        .add(http_retry_strategy(on_retry=lambda args: delays.append(args.delay)))
        .build()
    )
    client = make(clients, kind, pipeline)
    assert (await client.request("GET", url)).status_code == 200
    assert delays == [MAX_DURATION]


def _failing(*_args: Any) -> None:
    msg = "down"
    raise ConnectionError(msg)


async def _failing_async(*_args: Any) -> None:
    _failing()


def test_a_generated_delay_above_the_longest_duration_is_capped_sync() -> None:
    """`delay_generator` returning 1e10 waits (is cut by the timeout), never OverflowError."""
    pipeline = ResiliencePipelineBuilder().add_timeout(0.3).add_retry(delay_generator=lambda _args: 1e10).build()
    started = time.monotonic()
    with pytest.raises(TimeoutRejectedError):
        pipeline.execute(_failing)
    assert time.monotonic() - started < 5


async def test_a_generated_delay_above_the_longest_duration_is_capped_async() -> None:
    pipeline = ResiliencePipelineBuilder().add_timeout(0.3).add_retry(delay_generator=lambda _args: 1e10).build()
    started = time.monotonic()
    with pytest.raises(TimeoutRejectedError):
        await pipeline.execute_async(_failing_async)
    assert time.monotonic() - started < 5


def test_a_generated_delay_is_reported_capped() -> None:
    """What `on_retry` sees is the delay waited: `MAX_DURATION` (fake clock)."""
    delays: list[float] = []
    clock = FakeTimeProvider(auto_advance=True)

    def on_retry(args: OnRetryArguments) -> None:
        delays.append(args.delay)

    pipeline = (
        ResiliencePipelineBuilder(time_provider=clock)
        .add_retry(max_retries=1, delay_generator=lambda _args: 1e10, on_retry=on_retry)
        .build()
    )
    with pytest.raises(ConnectionError):
        pipeline.execute(_failing)
    assert delays == [MAX_DURATION]


# -- a total timeout shorter than Retry-After -------------------------------------------------


async def test_a_retry_after_beyond_the_total_timeout_returns_the_response_readable(
    server: ScriptedServer, kind: str, clients: list[Client]
) -> None:
    """Retry-After 3 s with 0.5 s of total timeout: the 503 at once, its body readable."""
    url = server.script("/busy", default=Reply(503, {"Retry-After": "3"}, body=b"busy"))
    client = make(clients, kind, standard_pipeline(total_timeout=0.5, attempt_timeout=0.4))
    started = time.monotonic()
    response = await client.request("GET", url)
    assert (response.status_code, response.content) == (503, b"busy")
    assert time.monotonic() - started < 2.5  # well short of the 3 s asked for
    assert len(server.requests_to("/busy")) == 1


async def test_a_retry_wait_cut_by_a_plain_timeout_returns_the_response_readable(
    server: ScriptedServer, kind: str, clients: list[Client]
) -> None:
    """A timeout that publishes no deadline cuts the wait: the 503 given back is still readable.

    Sync, the retry hands back the response it gave up on (its small body read into it); async,
    the timeout cancels the task and raises its error.
    """
    url = server.script("/busy", default=Reply(503, {"Retry-After": "3"}, body=b"busy"))
    pipeline = ResiliencePipelineBuilder().add_timeout(0.5).add(http_retry_strategy()).build()
    client = make(clients, kind, pipeline)
    if kind == "sync":
        response = await client.request("GET", url)
        assert (response.status_code, response.content) == (503, b"busy")
    else:
        with pytest.raises(TimeoutRejectedError):
            await client.request("GET", url)
    assert len(server.requests_to("/busy")) == 1


async def test_a_retry_after_within_the_total_timeout_is_still_waited(
    server: ScriptedServer, kind: str, clients: list[Client]
) -> None:
    """The rule only drops waits that cannot end in time: a short one is waited and retried."""
    url = server.script("/busy", Reply(503, {"Retry-After": "0.1"}), Reply(200, body=b"done"))
    client = make(clients, kind, standard_pipeline(total_timeout=10, attempt_timeout=5))
    response = await client.request("GET", url)
    assert (response.status_code, response.content) == (200, b"done")
    assert len(server.requests_to("/busy")) == 2


# -- one-shot request bodies ------------------------------------------------------------------


def _chunks() -> Any:
    yield b"part one, "
    yield b"part two"


async def _chunks_async() -> Any:
    for chunk in _chunks():
        yield chunk


async def test_a_streamed_request_body_is_not_retried(server: ScriptedServer, kind: str, clients: list[Client]) -> None:
    """A PUT with a generator body answered 503: that 503 is the answer; one request, whole."""
    url = server.script("/upload", Reply(503, body=b"try later"), Reply(200))
    client = make(clients, kind, standard_pipeline(total_timeout=10, retry_delay=0.01))
    body = _chunks() if kind == "sync" else _chunks_async()
    response = await client.request("PUT", url, content=body)
    assert (response.status_code, response.content) == (503, b"try later")
    assert [seen.body for seen in server.requests_to("/upload")] == [b"part one, part two"]


async def test_a_streamed_request_body_is_not_retried_even_when_allowed(
    server: ScriptedServer, kind: str, clients: list[Client]
) -> None:
    """`RETRY_EXTENSION: True` cannot make a consumed body whole again: still one request."""
    url = server.script("/upload", Reply(503, body=b"try later"), Reply(200))
    client = make(clients, kind, standard_pipeline(total_timeout=10, retry_delay=0.01))
    body = _chunks() if kind == "sync" else _chunks_async()
    response = await client.request("POST", url, content=body, extensions={RETRY_EXTENSION: True})
    assert response.status_code == 503
    assert len(server.requests_to("/upload")) == 1


async def test_an_in_memory_body_is_still_retried(server: ScriptedServer, kind: str, clients: list[Client]) -> None:
    """Bytes, JSON and form bodies can be sent again: the PUT is retried, whole each time."""
    url = server.script("/upload", Reply(503), Reply(200))
    client = make(clients, kind, standard_pipeline(total_timeout=10, retry_delay=0.01))
    response = await client.request("PUT", url, json={"a": 1})
    assert response.status_code == 200
    assert [seen.body for seen in server.requests_to("/upload")] == [b'{"a":1}'] * 2


async def test_a_multipart_body_is_still_retried(server: ScriptedServer, kind: str, clients: list[Client]) -> None:
    """httpx renders a multipart body afresh for each send: retried, whole each time."""
    url = server.script("/upload", Reply(503), Reply(200))
    client = make(clients, kind, standard_pipeline(total_timeout=10, retry_delay=0.01))
    response = await client.request("PUT", url, files={"f": ("a.txt", b"content")})
    assert response.status_code == 200
    first, second = (seen.body for seen in server.requests_to("/upload"))
    assert b"content" in first
    assert first == second


# -- many authorities -------------------------------------------------------------------------


async def test_past_1024_authorities_the_least_recently_used_circuit_is_forgotten(
    server: ScriptedServer, kind: str, clients: list[Client]
) -> None:
    """The busiest host, first seen, keeps its circuit while 1,100 other hosts come and go.

    The others are loopback addresses nobody listens on (refused at once, one failure each:
    their circuits stay closed and are forgotten least recently used first).
    """
    busy = server.script("/api", default=Reply(200))
    pipeline = ResiliencePipelineBuilder().add(http_circuit_breaker_strategy()).build()
    breaker = next(s for s in pipeline.strategies if isinstance(s, AuthorityCircuitBreaker))
    client = make(clients, kind, pipeline)
    assert (await client.request("GET", busy)).status_code == 200
    for i in range(1100):
        with pytest.raises(httpx.ConnectError):
            await client.request("GET", f"http://127.0.{i // 200 + 1}.{i % 200 + 2}:{server.port}/")
        if i % 100 == 0:
            assert (await client.request("GET", busy)).status_code == 200
    circuits = breaker.circuits
    assert len(circuits) == 1024
    assert f"http://127.0.0.1:{server.port}" in circuits
    assert "http://127.0.1.2:" + str(server.port) not in circuits  # the least recently used went first


async def test_a_streamed_request_body_is_not_hedged(server: ScriptedServer, kind: str, clients: list[Client]) -> None:
    """A slow answer would start a hedged attempt after 50 ms: not with a one-shot body."""
    url = server.script("/upload", Reply(200, body=b"stored", delay=0.4))
    client = make(clients, kind, standard_hedging_pipeline(total_timeout=10, hedging_delay=0.05))
    body = _chunks() if kind == "sync" else _chunks_async()
    with capture_events() as events:
        response = await client.request("PUT", url, content=body)
    assert (response.status_code, response.content) == (200, b"stored")
    assert [seen.body for seen in server.requests_to("/upload")] == [b"part one, part two"]
    assert [e.name for e in events if e.name == "OnHedging"] == []  # no second attempt even started


@pytest.mark.parametrize(
    ("http_options", "built_in", "passed"),
    [
        (
            "HttpRetryStrategyOptions",
            "RetryStrategyOptions",
            {"max_retries", "delay", "backoff", "jitter", "max_delay", "handle", "on_retry", "name"},
        ),
        ("HttpTimeoutStrategyOptions", "TimeoutStrategyOptions", {"timeout", "on_timeout", "name"}),
        (
            "HttpCircuitBreakerStrategyOptions",
            "CircuitBreakerStrategyOptions",
            {
                "failure_ratio",
                "minimum_throughput",
                "sampling_duration",
                "break_duration",
                "handle",
                "manual_control",
                "on_opened",
                "on_closed",
                "on_half_opened",
                "name",
            },
        ),
        (
            "HttpHedgingStrategyOptions",
            "HedgingStrategyOptions",
            {"max_hedged_attempts", "delay", "delay_generator", "handle", "on_hedging", "name"},
        ),
    ],
)
def test_http_options_pass_on_exactly_the_options_they_share_by_name(
    http_options: str, built_in: str, passed: set[str]
) -> None:
    """An HTTP options class hands the built-in strategy the fields both declare by name: a
    new field that happened to share a name with a built-in option would change this set."""
    import dataclasses

    import resilience.http
    import resilience.strategies

    ours = {field.name for field in dataclasses.fields(getattr(resilience.http, http_options)) if field.init}
    theirs = {field.name for field in dataclasses.fields(getattr(resilience.strategies, built_in)) if field.init}
    assert ours & theirs == passed
