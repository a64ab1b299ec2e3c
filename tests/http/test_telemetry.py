"""HTTP tags on the events' metrics: method, server, status; nothing of unbounded cardinality."""

from __future__ import annotations

from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from resilience.http import standard_pipeline
from resilience.telemetry import TelemetryOptions
from resilience.testing import FakeTimeProvider, capture_events
from tests.http.conftest import Client
from tests.http_support import Reply, ScriptedServer, free_port


def points(reader: InMemoryMetricReader, name: str) -> list[dict[str, Any]]:
    data = reader.get_metrics_data()
    assert data is not None
    return [
        dict(point.attributes or {})
        for resource in data.resource_metrics
        for scope in resource.scope_metrics
        for metric in scope.metrics
        if metric.name == name
        for point in metric.data.data_points
    ]


def pipeline(reader: InMemoryMetricReader) -> Any:
    return standard_pipeline(
        name="catalog",
        time_provider=FakeTimeProvider(auto_advance=True, seed=3),
        telemetry=TelemetryOptions(meter_provider=MeterProvider(metric_readers=[reader])),
    )


async def test_events_carry_the_request_and_response_tags(
    server: ScriptedServer, kind: str, clients: list[Client]
) -> None:
    url = server.script("/items/42", Reply(503), Reply(200))
    reader = InMemoryMetricReader()
    client = Client(kind, pipeline(reader))
    clients.append(client)
    with capture_events() as events:
        assert (await client.request("GET", url)).status_code == 200
    assert [e.name for e in events if e.strategy_name == "Retry"] == ["ExecutionAttempt", "OnRetry", "ExecutionAttempt"]
    server_tags = {"http.request.method": "GET", "server.address": "127.0.0.1", "server.port": server.port}
    (retry,) = [p for p in points(reader, "resilience.strategy.events") if p["event.name"] == "OnRetry"]
    assert retry == {
        "event.name": "OnRetry",
        "event.severity": "Warning",
        "pipeline.name": "catalog",
        "strategy.name": "Retry",
        "http.response.status_code": 503,
        "error.type": "503",  # a handled HTTP result's failure is its status code
        **server_tags,
    }
    attempts = points(reader, "resilience.strategy.attempt.duration")
    assert sorted((p["http.response.status_code"], p.get("error.type")) for p in attempts) == [
        (200, None),
        (503, "503"),
    ]
    assert all(p.items() >= server_tags.items() for p in attempts)
    (executed,) = points(reader, "resilience.pipeline.duration")
    assert executed["http.response.status_code"] == 200
    assert "error.type" not in executed
    every_value = [str(v) for p in points(reader, "resilience.strategy.events") + attempts for v in p.values()]
    assert not any("/items" in value for value in every_value)  # never the path or URL


@pytest.mark.parametrize(("method", "tagged"), [("PURGE", "_OTHER"), ("PATCH", "PATCH")])
async def test_an_unknown_method_is_tagged_other(
    server: ScriptedServer, kind: str, clients: list[Client], method: str, tagged: str
) -> None:
    url = server.script("/cache", Reply(200))
    reader = InMemoryMetricReader()
    client = Client(kind, pipeline(reader))
    clients.append(client)
    await client.request(method, url)
    (executed,) = points(reader, "resilience.pipeline.duration")
    assert executed["http.request.method"] == tagged


async def test_a_transport_error_is_tagged_with_its_type_and_no_status(kind: str, clients: list[Client]) -> None:
    reader = InMemoryMetricReader()
    client = Client(kind, pipeline(reader))
    clients.append(client)
    port = free_port()
    with pytest.raises(Exception, match="onnect"):
        await client.request("GET", f"http://127.0.0.1:{port}/")
    retries = [p for p in points(reader, "resilience.strategy.events") if p["event.name"] == "OnRetry"]
    assert retries
    assert all(p["exception.type"] == p["error.type"] == "httpx.ConnectError" for p in retries)
    assert all("http.response.status_code" not in p for p in retries)
    assert all(p["server.port"] == port for p in retries)


async def test_hedged_attempts_carry_the_tags_too(server: ScriptedServer, kind: str, clients: list[Client]) -> None:
    """A hedged attempt runs on another thread or task: the request's tags go with it."""
    from resilience.http import standard_hedging_pipeline

    url = server.script("/hedged", Reply(503), Reply(200))
    reader = InMemoryMetricReader()
    pipeline = standard_hedging_pipeline(
        name="search",
        hedging_delay=30,
        telemetry=TelemetryOptions(meter_provider=MeterProvider(metric_readers=[reader])),
    )
    client = Client(kind, pipeline)
    clients.append(client)
    assert (await client.request("GET", url)).status_code == 200
    server_tags = {"http.request.method": "GET", "server.address": "127.0.0.1", "server.port": server.port}
    (hedging,) = [p for p in points(reader, "resilience.strategy.events") if p["event.name"] == "OnHedging"]
    assert hedging.items() >= {"strategy.name": "Hedging", **server_tags}.items()
    attempts = [p for p in points(reader, "resilience.strategy.attempt.duration") if p["strategy.name"] == "Hedging"]
    assert sorted(p["http.response.status_code"] for p in attempts) == [200, 503]
    assert all(p.items() >= server_tags.items() for p in attempts)
