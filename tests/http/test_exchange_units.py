"""The per-request exchange and the release of responses, without a server."""

from __future__ import annotations

import httpx
import pytest
import requests
from urllib3.util import Timeout

from resilience.http._transport import DEADLINE, _Exchange, release, release_async
from resilience.http.requests import _RequestsExchange
from resilience.testing import FakeTimeProvider


def prepared() -> requests.PreparedRequest:
    return requests.Request("GET", "http://example.com:8080/a").prepare()


@pytest.mark.parametrize(
    ("own", "expected"),
    [
        (None, 2.0),
        (5, 2.0),
        (1.5, 1.5),
        ((None, 5), (2.0, 2.0)),
        ((1, 5), (1, 2.0)),
    ],
)
def test_the_requests_timeout_is_cut_to_the_time_left(own: object, expected: object) -> None:
    clock = FakeTimeProvider()
    exchange = _RequestsExchange(prepared(), clock, own)
    token = DEADLINE.set(clock.monotonic() + 2.0)
    try:
        assert exchange.attempt_timeout() == expected
    finally:
        DEADLINE.reset(token)


def test_the_requests_timeout_is_the_callers_without_a_deadline_or_as_a_urllib3_timeout() -> None:
    clock = FakeTimeProvider()
    assert _RequestsExchange(prepared(), clock, (1, 5)).attempt_timeout() == (1, 5)
    own = Timeout(connect=1, read=5)
    token = DEADLINE.set(clock.monotonic() + 0.5)
    try:
        assert _RequestsExchange(prepared(), clock, own).attempt_timeout() is own
    finally:
        DEADLINE.reset(token)


def test_the_requests_exchange_tags_and_authority() -> None:
    exchange = _RequestsExchange(prepared(), FakeTimeProvider(), None)
    assert exchange.server_tags() == {
        "http.request.method": "GET",
        "server.address": "example.com",
        "server.port": 8080,
    }


def test_httpx_timeouts_are_kept_when_shorter_and_cut_when_longer() -> None:
    clock = FakeTimeProvider()
    extensions = {"timeout": {"connect": 1.0, "read": 5.0, "write": 5.0, "pool": None}}
    exchange = _Exchange(httpx.Request("GET", "https://example.com/"), clock, extensions)
    token = DEADLINE.set(clock.monotonic() + 10.0)
    try:
        cut = exchange.prepare().extensions  # the client's own are shorter, but pool has none: it gets the time left
        assert cut == {"timeout": {"connect": 1.0, "read": 5.0, "write": 5.0, "pool": 10.0}}
    finally:
        DEADLINE.reset(token)
    extensions["timeout"]["pool"] = 5.0
    token = DEADLINE.set(clock.monotonic() + 10.0)
    try:
        assert exchange.prepare().extensions is extensions  # nothing to cut: the caller's, as they are
    finally:
        DEADLINE.reset(token)
    token = DEADLINE.set(clock.monotonic() + 2.0)
    try:
        assert exchange.prepare().extensions == {"timeout": {"connect": 1.0, "read": 2.0, "write": 2.0, "pool": 2.0}}
    finally:
        DEADLINE.reset(token)
    assert exchange.prepare().extensions is extensions  # no deadline


class Unreadable(httpx.SyncByteStream, httpx.AsyncByteStream):
    def __iter__(self):  # type: ignore[override]
        raise httpx.ReadError("gone")
        yield b""  # pragma: no cover

    async def __aiter__(self):  # type: ignore[override]
        raise httpx.ReadError("gone")
        yield b""  # pragma: no cover


def test_release_drains_a_small_body_and_keeps_it_readable() -> None:
    response = httpx.Response(200, headers={"content-length": "2"}, stream=httpx.ByteStream(b"ok"))
    release(response)
    assert response.is_closed
    assert response.content == b"ok"


def test_release_closes_a_large_or_unreadable_body_unread() -> None:
    large = httpx.Response(200, headers={"content-length": str(10**6)}, stream=Unreadable())
    release(large)
    assert large.is_closed
    unreadable = httpx.Response(200, headers={"content-length": "2"}, stream=Unreadable())
    release(unreadable)
    assert unreadable.is_closed


async def test_release_async_drains_closes_and_never_raises() -> None:
    small = httpx.Response(200, headers={"content-length": "2"}, stream=httpx.ByteStream(b"ok"))
    await release_async(small)
    assert small.is_closed
    assert small.content == b"ok"
    unreadable = httpx.Response(200, headers={"content-length": "2"}, stream=Unreadable())
    await release_async(unreadable)
    assert unreadable.is_closed
