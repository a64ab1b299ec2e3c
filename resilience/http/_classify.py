"""What an HTTP outcome means, as pure code: transient or not, retryable or not, Retry-After.

- `is_transient(outcome)`: a transport error (timeout, network, the server hanging up), an
  attempt timeout, or a 408, 429 or 5xx response.
- `retry_allowed(request, ...)`: only idempotent methods, unless the request or the pipeline
  opts in.
- `parse_retry_after(response, now)`: the `Retry-After` header (seconds or an HTTP-date) in seconds.
- `authority(url)`: scheme, host and port, the key of a per-authority circuit.
"""

from __future__ import annotations

import datetime as dt
import email.utils
import math
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, Final

import httpx

from resilience.exceptions import TimeoutRejectedError

if TYPE_CHECKING:
    from resilience._outcome import Outcome

__all__ = [
    "IDEMPOTENT_METHODS",
    "REQUEST",
    "RETRY_EXTENSION",
    "authority",
    "current_request",
    "is_transient",
    "is_transient_status",
    "parse_retry_after",
    "retry_allowed",
]

REQUEST: Final[ContextVar[tuple[httpx.Request, str] | None]] = ContextVar("resilience_http_request", default=None)
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
_TRANSIENT_ERRORS: Final = (
    httpx.TimeoutException,
    httpx.NetworkError,
    httpx.RemoteProtocolError,
    httpx.ProxyError,
    TimeoutRejectedError,
)
_IDEMPOTENCY_KEY: Final = "idempotency-key"


def is_transient_status(status_code: int) -> bool:
    """True for 408 Request Timeout, 429 Too Many Requests and every 5xx."""
    return status_code >= 500 or status_code in (408, 429)


def is_transient(outcome: Outcome[Any]) -> bool:
    """True when an outcome is worth another attempt and counts against a circuit.

    A transport error (timeout, network error, the server closing the connection), an attempt
    timeout (`TimeoutRejectedError`), or a response with a transient status (408, 429, 5xx).
    """
    error = outcome.error
    if error is not None:
        return isinstance(error, _TRANSIENT_ERRORS)
    value = outcome.value
    return isinstance(value, httpx.Response) and is_transient_status(value.status_code)


def current_request(outcome: Outcome[Any] | None = None) -> httpx.Request | None:
    """The request a resilient transport is sending, for code running in its pipeline.

    Callbacks (`on_retry`, `on_opened`, ...), predicates and the callable see it while the
    transport runs the pipeline; elsewhere, the request of `outcome`'s response, else None.
    """
    sending = REQUEST.get()
    if sending is not None:
        return sending[0]
    value = None if outcome is None else outcome.value
    if isinstance(value, httpx.Response):
        return value._request
    return None


def retry_allowed(request: httpx.Request | None, *, unsafe_methods: bool = False) -> bool:
    """Whether sending `request` again is allowed.

    The request's `RETRY_EXTENSION` extension decides when present; otherwise idempotent
    methods are, and so are the others when `unsafe_methods` is true or the request carries an
    `Idempotency-Key` header (the server then deduplicates it). Unknown request: allowed.
    """
    if request is None:
        return True
    chosen = request.extensions.get(RETRY_EXTENSION)
    if chosen is not None:
        return bool(chosen)
    return unsafe_methods or request.method in IDEMPOTENT_METHODS or _IDEMPOTENCY_KEY in request.headers


def parse_retry_after(response: httpx.Response, now: float) -> float | None:
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
    scheme = url.scheme
    port = url.port or _DEFAULT_PORTS.get(scheme, 0)
    return f"{scheme}://{url.host}:{port}"
