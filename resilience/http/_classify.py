"""What an HTTP outcome means, as pure code: transient or not, retryable or not, Retry-After.

- `is_transient(outcome)`: a transport error (timeout, network, the server hanging up), an
  attempt timeout, or a 408, 429 or 5xx response.
- `retry_allowed(request, ...)`: only idempotent methods, unless the request or the pipeline
  opts in; never a one-shot (streamed) body.
- `parse_retry_after(response, now)`: the `Retry-After` header (seconds or an HTTP-date) in seconds.
- `authority(url)`: scheme, host and port, the key of a per-authority circuit.

The rules know httpx's responses and errors; another client (the `requests` adapter) adds its
own with `register_client` when its module is imported.
"""

from __future__ import annotations

import datetime as dt
import email.utils
import math
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, Final, Protocol, TypeGuard

import httpx

from resilience.exceptions import TimeoutRejectedError

if TYPE_CHECKING:
    from collections.abc import Callable

    from resilience._outcome import Outcome

__all__ = [
    "IDEMPOTENT_METHODS",
    "REQUEST",
    "RETRY_EXTENSION",
    "AnyRequest",
    "AnyResponse",
    "authority",
    "authority_of",
    "current_request",
    "is_response",
    "is_transient",
    "parse_retry_after",
    "register_client",
    "replayable",
    "retry_allowed",
]


class AnyRequest(Protocol):
    """What the rules read of a request: httpx's `Request` or requests' `PreparedRequest`."""

    @property
    def method(self) -> str | None: ...

    @property
    def headers(self) -> Any: ...


class AnyResponse(Protocol):
    """What the rules read of a response: httpx's or requests' `Response`."""

    @property
    def status_code(self) -> int: ...

    @property
    def headers(self) -> Any: ...


REQUEST: Final[ContextVar[tuple[Any, str] | None]] = ContextVar("resilience_http_request", default=None)
"""The request a resilient transport is sending and its authority, while its pipeline runs."""

IDEMPOTENT_METHODS: Final = frozenset({"GET", "HEAD", "OPTIONS", "PUT", "DELETE", "TRACE"})
"""The methods retried (and hedged) by default: RFC 9110's idempotent methods."""

RETRY_EXTENSION: Final = "resilience.retry"
"""The `httpx` request extension that overrides the method rule for one request.

`client.post(url, extensions={RETRY_EXTENSION: True})` lets a POST be retried (it must be
safe to repeat); `False` forbids retrying even a GET.
"""

# Transport errors worth another attempt: the request may not have reached the server, or the
# server did not answer in time. A LocalProtocolError or UnsupportedProtocol is the caller's
# mistake and would fail the same way again.
_TRANSIENT_ERRORS: tuple[type[BaseException], ...] = (
    httpx.TimeoutException,
    httpx.NetworkError,
    httpx.RemoteProtocolError,
    httpx.ProxyError,
    TimeoutRejectedError,
)
_NOT_TRANSIENT: tuple[type[BaseException], ...] = ()  # subclasses of the above that are not
_RESPONSES: tuple[type, ...] = (httpx.Response,)
_DISCARDS: dict[type, Callable[[Any], None]] = {}


def register_client(
    response: type,
    *,
    transient: tuple[type[BaseException], ...],
    not_transient: tuple[type[BaseException], ...] = (),
    discard: Callable[[Any], None],
) -> None:
    """Teach the rules another client's responses and errors (its adapter module calls this once).

    `transient`: its errors worth another attempt, except the `not_transient` subclasses;
    `discard(response)`: closes a response nobody will read.
    """
    global _TRANSIENT_ERRORS, _NOT_TRANSIENT, _RESPONSES  # noqa: PLW0603 - read on each call, set once per client
    if response in _RESPONSES:
        return
    _TRANSIENT_ERRORS = (*_TRANSIENT_ERRORS, *transient)
    _NOT_TRANSIENT = (*_NOT_TRANSIENT, *not_transient)
    _RESPONSES = (*_RESPONSES, response)
    _DISCARDS[response] = discard


def is_response(value: object) -> TypeGuard[AnyResponse]:
    """Whether `value` is an HTTP response of a known client (httpx, or a registered one)."""
    return isinstance(value, _RESPONSES)


def discarder(response: object) -> Callable[[Any], None] | None:
    """How to close a response of a registered client (None for httpx's and for anything else)."""
    return _DISCARDS.get(type(response)) if _DISCARDS else None


_IDEMPOTENCY_KEY: Final = "idempotency-key"


def is_transient(outcome: Outcome[Any]) -> bool:
    """True when an outcome is worth another attempt and counts against a circuit.

    A transport error (timeout, network error, the server closing the connection), an attempt
    timeout (`TimeoutRejectedError`), or a response with a transient status (408, 429, 5xx).
    """
    error = outcome.error
    if error is not None:
        return isinstance(error, _TRANSIENT_ERRORS) and not isinstance(error, _NOT_TRANSIENT)
    value = outcome.value
    return is_response(value) and (value.status_code >= 500 or value.status_code in (408, 429))


def current_request(outcome: Outcome[Any] | None = None) -> Any:
    """The request a resilient transport is sending, for code running in its pipeline.

    Callbacks (`on_retry`, `on_opened`, ...), predicates and the callable see it while the
    transport runs the pipeline; elsewhere, the request of `outcome`'s response, else None.
    An `httpx.Request`, or a `requests.PreparedRequest` under the `requests` adapter.
    """
    sending = REQUEST.get()
    if sending is not None:
        return sending[0]
    value = None if outcome is None else outcome.value
    if not isinstance(value, _RESPONSES):
        return None
    try:
        return getattr(value, "request", None)
    except RuntimeError:  # an httpx response built by hand, with no request
        return None


def replayable(request: AnyRequest) -> bool:
    """Whether `request`'s body can be sent again: in memory (bytes, text, JSON, a form) or multipart.

    A body streamed from a generator, an iterator or a file is read once: sending it again
    would send it truncated (or fail).
    """
    if isinstance(request, httpx.Request):
        stream = request.stream
        # httpx builds multipart bodies afresh on each read (rewinding their files).
        return isinstance(stream, httpx.ByteStream) or request.headers.get("content-type", "").startswith(
            "multipart/form-data"
        )
    body = getattr(request, "body", None)
    return body is None or isinstance(body, bytes | str)


def retry_allowed(request: AnyRequest | None, *, unsafe_methods: bool = False) -> bool:
    """Whether sending `request` again is allowed.

    Never for a one-shot body (`replayable`). Otherwise the request's `RETRY_EXTENSION`
    extension decides when present; else idempotent methods are, and so are the others when
    `unsafe_methods` is true or the request carries an `Idempotency-Key` header (the server
    then deduplicates it). Unknown request: allowed.
    A `requests` request has no extensions: the method and the header decide.
    """
    if request is None:
        return True
    if not replayable(request):
        return False
    extensions = getattr(request, "extensions", None)
    chosen = None if extensions is None else extensions.get(RETRY_EXTENSION)
    if chosen is not None:
        return bool(chosen)
    return unsafe_methods or request.method in IDEMPOTENT_METHODS or _IDEMPOTENCY_KEY in request.headers


def parse_retry_after(response: AnyResponse, now: float) -> float | None:
    """The response's `Retry-After` in seconds from `now` (a Unix time), or None.

    Both forms of RFC 9110: delay-seconds (a decimal fraction is accepted) and an HTTP-date; a
    date in the past is 0. A missing, malformed, negative or infinite value is None.
    """
    value = response.headers.get("retry-after")
    if value is None:
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError):
            return None
        if when.tzinfo is None:  # "-0000" and obsolete forms: the RFC says GMT
            when = when.replace(tzinfo=dt.UTC)
        return max(when.timestamp() - now, 0.0)
    if not math.isfinite(seconds) or seconds < 0:
        return None
    return seconds


_DEFAULT_PORTS: Final = {"http": 80, "https": 443, "ws": 80, "wss": 443}


def authority(url: httpx.URL) -> str:
    """`scheme://host:port` of a URL, the default port made explicit (one circuit per authority)."""
    return authority_of(url.scheme, url.host, url.port)


def authority_of(scheme: str, host: str | None, port: int | None) -> str:
    """`scheme://host:port`, the default port of the scheme when `port` is None."""
    return f"{scheme}://{host or ''}:{port or _DEFAULT_PORTS.get(scheme, 0)}"
