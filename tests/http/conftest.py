"""Fixtures of the HTTP tests: real local servers, and a client of either kind."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

import httpx
import pytest

from resilience.http import AsyncResilientTransport, ResilientTransport
from tests.http_support import ScriptedServer, serve

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Iterator

    from resilience import ResiliencePipeline


@pytest.fixture
def server() -> Iterator[ScriptedServer]:
    yield from serve()


@pytest.fixture
def other_server() -> Iterator[ScriptedServer]:
    yield from serve()


class Client:
    """An httpx client (sync or async) over a resilient transport, used the same way by tests."""

    def __init__(self, kind: str, pipeline: ResiliencePipeline, **transport_options: Any) -> None:
        self.kind = kind
        if kind == "sync":
            self.inner = httpx.HTTPTransport(**transport_options)
            self.sync = httpx.Client(transport=ResilientTransport(pipeline, self.inner))
        else:
            self.ainner = httpx.AsyncHTTPTransport(**transport_options)
            self.asyncc = httpx.AsyncClient(transport=AsyncResilientTransport(pipeline, self.ainner))

    async def request(self, method: str, url: str, **options: Any) -> httpx.Response:
        if self.kind == "sync":
            # On a thread of its own, as sync code runs: on the loop's thread a sync pipeline's
            # timers would go to the (then blocked) running loop.
            return await asyncio.to_thread(self.sync.request, method, url, **options)
        return await self.asyncc.request(method, url, **options)

    @property
    def pool(self) -> Any:
        return (self.inner if self.kind == "sync" else self.ainner)._pool

    async def close(self) -> None:
        if self.kind == "sync":
            self.sync.close()
        else:
            await self.asyncc.aclose()


@pytest.fixture(params=["sync", "async"])
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
async def clients(kind: str) -> AsyncIterator[list[Client]]:
    """Every client a test makes with `make(...)`, closed after it."""
    made: list[Client] = []
    yield made
    for client in made:
        await client.close()
