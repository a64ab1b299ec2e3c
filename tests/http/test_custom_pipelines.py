"""The transports with pipelines users build themselves, and the HTTP strategies one by one."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypeVar

import httpx
import pytest

from resilience import PipelineBuilder, ResiliencePipelineBuilder
from resilience.http import (
    AsyncResilientTransport,
    AuthorityCircuitBreaker,
    ResilientTransport,
    http_circuit_breaker_strategy,
    http_retry_strategy,
    http_timeout_strategy,
    standard_pipeline,
)
from resilience.http._transport import _Exchange
from resilience.strategies import CircuitState, retry_strategy
from resilience.telemetry import TelemetryEvent
from resilience.telemetry._event import Severity
from resilience.testing import FakeTimeProvider
from tests.http.conftest import Client
from tests.http_support import Reply, ScriptedServer

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Iterator

    from resilience import ResilienceContext
    from resilience.strategies import OnRetryArguments

T = TypeVar("T")


async def test_a_plain_retry_over_responses_still_closes_each_discarded_one(
    server: ScriptedServer, kind: str, clients: list[Client]
) -> None:
    """The transport closes what an attempt left behind even when the retry knows nothing of HTTP."""
    url = server.script("/plain", Reply(503), Reply(503), Reply(200))
    pipeline = (
        ResiliencePipelineBuilder(time_provider=FakeTimeProvider(auto_advance=True))
        .add_retry(max_retries=3, delay=1, handle_result=lambda r: r.status_code == 503)
        .build()
    )
    client = Client(kind, pipeline, limits=httpx.Limits(max_connections=1))
    clients.append(client)
    response = await client.request("GET", url, timeout=httpx.Timeout(5.0, pool=1.0))
    assert response.status_code == 200
    assert (
        response.request.extensions["timeout"] == httpx.Timeout(5.0, pool=1.0).as_dict()
    )  # no deadline: the client's own


class Keep:
    """A strategy that runs the inner pipeline, keeps its result, then fails the execution."""

    def __init__(self) -> None:
        self.kept: list[Any] = []

    def execute(self, callback: Callable[[ResilienceContext], T], context: ResilienceContext, /) -> T:
        self.kept.append(callback(context))
        raise RuntimeError("rejected after the fact")

    async def execute_async(
        self, callback: Callable[[ResilienceContext], Awaitable[T]], context: ResilienceContext, /
    ) -> T:
        self.kept.append(await callback(context))
        raise RuntimeError("rejected after the fact")


async def test_when_the_pipeline_raises_every_response_is_closed(
    server: ScriptedServer, kind: str, clients: list[Client]
) -> None:
    url = server.script("/kept", Reply(200, body=b"unread"))
    keep = Keep()
    client = Client(kind, PipelineBuilder().add(keep).build())
    clients.append(client)
    with pytest.raises(RuntimeError, match="after the fact"):
        await client.request("GET", url)
    (response,) = keep.kept
    assert response.is_closed


async def test_a_shorter_client_timeout_wins_over_the_deadline(
    server: ScriptedServer, kind: str, clients: list[Client]
) -> None:
    """httpx's own read timeout, shorter than the attempt's, ends the attempt as httpx.ReadTimeout."""
    url = server.script("/slow", Reply(delay=30))
    pipeline = PipelineBuilder().add(http_timeout_strategy(20)).build()
    client = Client(kind, pipeline)
    clients.append(client)
    with pytest.raises(httpx.ReadTimeout):
        await client.request("GET", url, timeout=0.2)


async def test_on_retry_sees_the_response_before_it_is_closed(
    server: ScriptedServer, kind: str, clients: list[Client]
) -> None:
    """The user's on_retry (sync or async) reads the response; it is closed right after."""
    url = server.script("/retry", Reply(503, body=b"overloaded"), Reply(200))
    seen: list[tuple[int, bytes]] = []
    responses: list[httpx.Response] = []

    def remember(args: OnRetryArguments) -> None:
        response = args.outcome.value
        responses.append(response)
        seen.append((response.status_code, response.read()))

    async def remember_async(args: OnRetryArguments) -> None:
        response = args.outcome.value
        responses.append(response)
        seen.append((response.status_code, await response.aread()))

    on_retry = remember if kind == "sync" else remember_async
    pipeline = (
        PipelineBuilder(time_provider=FakeTimeProvider(auto_advance=True))
        .add(http_retry_strategy(on_retry=on_retry))
        .build()
    )
    client = Client(kind, pipeline)
    clients.append(client)
    assert (await client.request("GET", url)).status_code == 200
    assert seen == [(503, b"overloaded")]
    assert responses[0].is_closed


async def test_one_circuit_for_every_authority_when_asked(
    server: ScriptedServer, other_server: ScriptedServer, kind: str, clients: list[Client]
) -> None:
    bad = server.script("/x", default=Reply(500))
    good = other_server.script("/x", default=Reply(200))
    pipeline = (
        PipelineBuilder()
        .add(http_circuit_breaker_strategy(per_authority=False, minimum_throughput=2, failure_ratio=0.5))
        .build()
    )
    client = Client(kind, pipeline)
    clients.append(client)
    await client.request("GET", bad)
    await client.request("GET", bad)
    with pytest.raises(Exception, match="circuit"):
        await client.request("GET", good)  # the one shared circuit is open
    assert other_server.requests_to("/x") == []


def test_circuits_beyond_the_limit_forget_the_oldest_closed_one() -> None:
    pipeline = PipelineBuilder().add(http_circuit_breaker_strategy()).build()
    (circuits,) = pipeline.strategies
    assert isinstance(circuits, AuthorityCircuitBreaker)
    first = circuits.circuit("http://a:1")
    assert circuits.circuit("http://a:1") is first
    for n in range(1, 1025):
        circuits.circuit(f"http://h{n}:80")
    assert len(circuits.circuits) == 1024
    assert "http://a:1" not in circuits.circuits
    assert set(circuits.circuits.values()) == {CircuitState.CLOSED}
    assert repr(circuits) == "<AuthorityCircuitBreaker circuits=1024>"


def test_outside_a_transport_the_circuit_is_shared_under_an_empty_key() -> None:
    pipeline = PipelineBuilder().add(http_circuit_breaker_strategy()).build()
    assert pipeline.execute(lambda: 42) == 42
    (circuits,) = pipeline.strategies
    assert isinstance(circuits, AuthorityCircuitBreaker)
    assert list(circuits.circuits) == [""]


def test_tags_name_the_default_port_only_when_the_url_has_one() -> None:
    exchange = _Exchange(httpx.Request("GET", "https://example.com/a"), FakeTimeProvider())
    event = TelemetryEvent("OnRetry", Severity.WARNING, None, None, None, None, None, None)
    assert exchange.tags(event) == {"http.request.method": "GET", "server.address": "example.com"}


async def test_the_transports_close_what_they_wrap() -> None:
    pipeline = PipelineBuilder().build()
    inner = httpx.HTTPTransport()
    with httpx.Client(transport=ResilientTransport(pipeline, inner)) as client:
        assert "ResilientTransport" in repr(client._transport)
    assert inner._pool.connections == []
    ainner = httpx.AsyncHTTPTransport()
    async with httpx.AsyncClient(transport=AsyncResilientTransport(pipeline, ainner)) as aclient:
        assert "AsyncResilientTransport" in repr(aclient._transport)
    default = ResilientTransport(pipeline)
    assert isinstance(default.transport, httpx.HTTPTransport)
    default.close()
    adefault = AsyncResilientTransport(pipeline)
    assert isinstance(adefault.transport, httpx.AsyncHTTPTransport)
    await adefault.aclose()


def test_a_response_arriving_after_the_execution_ended_is_refused() -> None:
    """A hedged loser answering late is told to discard its response (nothing is kept)."""
    exchange = _Exchange(httpx.Request("GET", "https://example.com/a"), FakeTimeProvider())
    early = httpx.Response(503)
    assert exchange.add(1, early)
    assert exchange.take_earlier(2) == []  # another flow's response is left alone
    assert exchange.finish() == [early]
    assert not exchange.add(1, httpx.Response(200))
    assert exchange.finish() == []


async def test_the_standard_pipeline_can_limit_the_rate(
    server: ScriptedServer, kind: str, clients: list[Client]
) -> None:
    from resilience import RateLimiterRejectedError
    from resilience.http import standard_pipeline

    url = server.script("/limited", default=Reply(200))
    pipeline = standard_pipeline(rate_limit=2, time_provider=FakeTimeProvider())
    assert [type(s).__name__ for s in pipeline.strategies[:2]] == ["ConcurrencyLimiterStrategy", "RateLimiterStrategy"]
    client = Client(kind, pipeline)
    clients.append(client)
    assert (await client.request("GET", url)).status_code == 200
    assert (await client.request("GET", url)).status_code == 200
    with pytest.raises(RateLimiterRejectedError):
        await client.request("GET", url)
    assert len(server.requests_to("/limited")) == 2


async def test_the_standard_pipeline_limits_requests_in_flight(server: ScriptedServer, clients: list[Client]) -> None:
    """.NET's default: 1000 requests in flight, no queue; here 1, so a second concurrent one is refused."""
    import asyncio

    from resilience import RateLimiterRejectedError
    from resilience.http import standard_pipeline

    slow = server.script("/slow", Reply(delay=1.0))
    quick = server.script("/quick", Reply(200))
    client = Client("async", standard_pipeline(max_concurrency=1))
    clients.append(client)
    first = asyncio.ensure_future(client.request("GET", slow))
    await asyncio.sleep(0.3)
    with pytest.raises(RateLimiterRejectedError):
        await client.request("GET", quick)
    assert (await first).status_code == 200
    assert (await client.request("GET", quick)).status_code == 200
    assert len(server.requests_to("/quick")) == 1


def test_the_standard_pipeline_is_dotnets_standard_resilience_handler() -> None:
    """Outermost first, with .NET's defaults: limiter 1000 in flight, total 30 s, retry 3 (2 s,
    exponential with jitter), a circuit per authority (ratio 0.1, 100 calls, 30 s, break 5 s),
    attempt 10 s; no rate limiter unless asked."""
    pipeline = standard_pipeline(name="api")
    assert [type(s).__name__ for s in pipeline.strategies] == [
        "ConcurrencyLimiterStrategy",
        "DeadlineTimeout",
        "RetryStrategy",
        "AuthorityCircuitBreaker",
        "DeadlineTimeout",
    ]
    assert "limit=1000" in repr(pipeline.strategies[0])
    assert "timeout=30" in repr(pipeline.strategies[1])
    retry = pipeline.strategies[2]._core  # type: ignore[attr-defined]
    assert (retry.max_retries, retry.delay, retry.backoff, retry.jitter) == (3, 2.0, "exponential", True)
    circuit = pipeline.strategies[3]._options  # type: ignore[attr-defined]
    assert (circuit.failure_ratio, circuit.minimum_throughput, circuit.sampling_duration, circuit.break_duration) == (
        0.1,
        100,
        30.0,
        5.0,
    )
    assert "timeout=10" in repr(pipeline.strategies[4])
    limited = standard_pipeline(max_concurrency=None, rate_limit=50)
    assert [type(s).__name__ for s in limited.strategies][:2] == ["RateLimiterStrategy", "DeadlineTimeout"]


def test_a_sync_attempt_gets_the_time_left_after_draining_the_earlier_response() -> None:
    """Draining a retried response takes time: the next attempt's client timeout is what is left after it."""
    clock = FakeTimeProvider()

    class SlowBody(httpx.SyncByteStream):
        def __iter__(self) -> Iterator[bytes]:
            clock.advance(0.6)  # the 503's small body takes 0.6 s to arrive
            yield b"x" * 10

    read_timeouts: list[float] = []

    def handler(request: httpx.Request) -> httpx.Response:
        read_timeouts.append(request.extensions["timeout"]["read"])
        if len(read_timeouts) == 1:
            return httpx.Response(503, headers={"content-length": "10"}, stream=SlowBody())
        return httpx.Response(200)

    pipeline = (
        PipelineBuilder(time_provider=clock)
        .add(http_timeout_strategy(2.0))
        .add(retry_strategy(max_retries=1, delay=0, handle_result=lambda response: response.status_code == 503))
        .build()
    )
    with httpx.Client(transport=ResilientTransport(pipeline, httpx.MockTransport(handler))) as client:
        assert client.get("http://example.test/").status_code == 200
    assert read_timeouts == [pytest.approx(2.0), pytest.approx(1.4)]
