"""A `requests` adapter that sends every request through a pipeline (extra `[requests]`).

    import requests
    from resilience.http import standard_pipeline
    from resilience.http.requests import ResilientHTTPAdapter

    session = requests.Session()
    session.mount("https://", ResilientHTTPAdapter(standard_pipeline(name="github")))
    session.get("https://api.github.com/zen")

The same code as the httpx transports: each attempt's `requests.Response` is the outcome's
value and requests' errors propagate unchanged; the HTTP strategies (`standard_pipeline`,
`standard_hedging_pipeline`, `http_*_strategy`) treat its transient errors and statuses, its
`Retry-After`, its idempotent methods and its per-authority circuits as they do httpx's; every
response the pipeline gives up on is closed; the time left before an HTTP timeout's deadline
becomes the attempt's `timeout=`. Importing this module teaches the HTTP rules requests' types.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import requests
from requests.adapters import HTTPAdapter

from resilience._pipeline import require_pipeline
from resilience.http._classify import REQUEST, authority_of, register_client
from resilience.http._transport import _Exchange, server_tags, small_body
from resilience.telemetry._otel import CONTEXT_TAGS

if TYPE_CHECKING:
    from resilience._pipeline import ResiliencePipeline
    from resilience._time import TimeProvider

__all__ = ["ResilientHTTPAdapter"]


def _discard(response: requests.Response) -> None:
    """Close a response nobody will read: a small body is read first, so its connection is reused."""
    try:
        if small_body(response.headers):
            _ = response.content  # read to the end: the connection goes back to the pool
    finally:
        response.close()


register_client(
    requests.Response,
    # A connection refused or reset, a timeout (connect or read), a body cut short.
    transient=(
        requests.exceptions.ConnectionError,
        requests.exceptions.Timeout,
        requests.exceptions.ChunkedEncodingError,
    ),
    # A certificate problem is a ConnectionError too, but would fail the same way again.
    not_transient=(requests.exceptions.SSLError,),
    discard=_discard,
)


class _RequestsExchange(_Exchange):
    """One request's state across its attempts, for a `requests.PreparedRequest`."""

    __slots__ = ("_authority", "_url", "prepared", "timeout")

    def __init__(self, request: requests.PreparedRequest, clock: TimeProvider, timeout: Any) -> None:
        # A PreparedRequest has no extensions to keep.
        super().__init__(request, clock, extensions={})  # type: ignore[arg-type]
        self.prepared: requests.PreparedRequest = request
        self.timeout = timeout
        self._url = parts = urlsplit(request.url or "")
        self._authority = authority_of(parts.scheme, parts.hostname, parts.port)

    def server_tags(self) -> dict[str, Any]:
        """The tags of every event of this request (as for httpx: no path, no URL)."""
        return server_tags(self.prepared.method or "", self._url.hostname or "", self._url.port)

    def enter(self) -> tuple[Any, Any]:
        """Publish the request and its authority (for the strategies) and the tags (for telemetry)."""
        return REQUEST.set((self.request, self._authority)), CONTEXT_TAGS.set(self.tags)

    def attempt_timeout(self) -> Any:
        """The caller's `timeout=`, shortened to the time left before the nearest HTTP timeout's deadline."""
        own = self.timeout
        cut = self.time_left()
        if cut is None or not isinstance(own, tuple | int | float | None):  # a urllib3 Timeout: the caller's, as given
            return own
        if isinstance(own, tuple):
            connect, read = own
            return (cut if connect is None else min(connect, cut), cut if read is None else min(read, cut))
        return cut if own is None else min(own, cut)


def _send(adapter: ResilientHTTPAdapter, exchange: _RequestsExchange, options: dict[str, Any]) -> requests.Response:
    """Send the request once (`attempt`'s `send`); its timeout is read as it goes: the time left now."""
    return HTTPAdapter.send(adapter, exchange.prepared, timeout=exchange.attempt_timeout(), **options)


class ResilientHTTPAdapter(HTTPAdapter):
    """A `requests` transport adapter that sends every request through a resilience pipeline.

    `session.mount("https://", ResilientHTTPAdapter(standard_pipeline()))`. Each attempt is
    sent by `requests.adapters.HTTPAdapter` (its connection pool: `pool_connections`,
    `pool_maxsize`, `pool_block`; urllib3's own retries stay off, the pipeline retries); its
    response is the attempt's outcome value and its errors propagate unchanged. Responses an
    attempt produced but the pipeline did not return are closed before the next attempt and at
    the end; the returned one is handed to the session as is (`stream=True` streams it).
    A request has no extensions in `requests`: an `Idempotency-Key` header (or the pipeline's
    `retry_unsafe_methods`) lets a POST be retried.
    """

    def __init__(
        self,
        pipeline: ResiliencePipeline,
        *,
        pool_connections: int = 10,
        pool_maxsize: int = 10,
        pool_block: bool = False,
    ) -> None:
        self.pipeline = require_pipeline(pipeline, "ResilientHTTPAdapter")  # checked before any pool is made
        super().__init__(
            pool_connections=pool_connections, pool_maxsize=pool_maxsize, max_retries=0, pool_block=pool_block
        )

    def send(  # noqa: PLR0917 - requests' signature
        self,
        request: requests.PreparedRequest,
        stream: bool = False,
        timeout: Any = None,
        verify: Any = True,
        cert: Any = None,
        proxies: Any = None,
    ) -> requests.Response:
        """Send `request` through the pipeline; return the response it settles on."""
        exchange = _RequestsExchange(request, self.pipeline.time_provider, timeout)
        options = {"stream": stream, "verify": verify, "cert": cert, "proxies": proxies}
        send = functools.partial(_send, self, exchange, options)
        return exchange.send(self.pipeline, send, requests.exceptions.Timeout)

    def __repr__(self) -> str:
        return f"<ResilientHTTPAdapter pipeline={self.pipeline!r}>"
