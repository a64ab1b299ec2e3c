"""`ResilientTransport` and `AsyncResilientTransport`: every httpx request through a pipeline.

Per request, an `_Exchange` holds what the attempts share: the request, its original
timeouts, and every response an attempt produced. The pipeline runs `attempt` (sync) or
`_attempt_async` once per attempt; each attempt

1. discards (drains a small body, then closes) every response an earlier attempt of the same
   thread or task produced, as the pipeline moved on from it: a retry never holds two
   connections (a hedged attempt, running beside the others, leaves theirs alone);
2. hands httpx the time left before the nearest deadline of an HTTP timeout strategy
   (`http_timeout_strategy`), so that a blocked sync read is really cut at the deadline;
3. sends the request through the wrapped transport.

When the pipeline returns, every response but the returned one is discarded; when it raises,
all of them are; a hedged attempt answering after that discards its own. The returned
response's stream is untouched (never buffered).

Under an HTTP hedging strategy (`ABORTABLE` set), a sync attempt sends its own shallow copy of
the request from a sender thread and waits for its answer or its signal, whichever comes
first: a blocking read cannot be interrupted, and the hedging strategy returns only once every
attempt has ended, so without this a loser's slow read would hold the winner's answer back. The
abandoned send discards its response when it arrives. Async attempts need none of this: a
cancelled task closes its connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import logging
import sys
import threading
from concurrent.futures import CancelledError, Future, InvalidStateError
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, Final, TypeVar

import httpx

from resilience._context import current_context
from resilience._pipeline import require_pipeline
from resilience._runtime._pool import Pool
from resilience._runtime._threads import on_fork_in_child
from resilience.http._classify import REQUEST, authority, discarder, is_response
from resilience.stores._steps import run_steps, run_steps_async
from resilience.telemetry._otel import CONTEXT_TAGS

if TYPE_CHECKING:
    from collections.abc import Callable

    from resilience._pipeline import ResiliencePipeline
    from resilience._signal import Signal
    from resilience._time import TimeProvider
    from resilience.stores._steps import Steps
    from resilience.telemetry._otel import EventFields

__all__ = [
    "ABORTABLE",
    "DEADLINE",
    "AsyncResilientTransport",
    "ResilientTransport",
    "attempt",
    "discard",
    "release",
    "release_async",
    "send_abortable",
    "server_tags",
    "small_body",
]

_logger = logging.getLogger("resilience")
R = TypeVar("R")

DEADLINE: Final[ContextVar[float | None]] = ContextVar("resilience_http_deadline", default=None)
"""The nearest deadline (time provider's `monotonic()`) set by the HTTP timeout strategies around the inner pipeline."""

ABORTABLE: Final[ContextVar[bool]] = ContextVar("resilience_http_abortable", default=False)
"""Set by the HTTP hedging strategy: sync attempts must end as soon as their signal aborts."""

# A discarded response's body is read (so the connection can serve the next request) only when
# it is announced this small; anything else closes the connection instead.
_DRAIN_LIMIT: Final = 64 * 1024
_MIN_TIMEOUT: Final = 0.001  # httpx reads 0 as "fail at once"; a deadline just passed gets this
# OpenTelemetry's semantic conventions: known methods by name, anything else as "_OTHER" (bounded).
_KNOWN_METHODS: Final = frozenset({"CONNECT", "DELETE", "GET", "HEAD", "OPTIONS", "PATCH", "POST", "PUT", "TRACE"})
_TIMEOUT_KEYS: Final = ("connect", "read", "write", "pool")
# How long an attempt that httpx timed out at our deadline waits for the timeout strategy's
# timer to fire (it normally does within milliseconds; the bound keeps a late timer from
# hanging the attempt).
_GRACE: Final = 1.0


def _signal() -> Signal:
    """The signal of the attempt running (the pipeline makes its context the ambient one)."""
    context = current_context()
    assert context is not None  # an attempt always runs under the pipeline's context
    return context.signal


def small_body(headers: Any) -> bool:
    """Whether a response's headers announce a body small enough to drain (`_DRAIN_LIMIT`)."""
    length = headers.get("content-length")
    return length is not None and length.isdigit() and int(length) <= _DRAIN_LIMIT


def discard(response: Any) -> None:
    """Close a response nobody will read, reading a small body first to keep its connection (`release`).

    An httpx response, or one of a registered client (`register_client`), closed its own way.
    """
    if isinstance(response, httpx.Response):
        release(response)
        return
    other = discarder(response)
    if other is not None:
        try:
            other(response)
        except Exception:  # the response is thrown away; nothing to report to the caller
            _logger.debug("discarding a response failed", exc_info=True)


def release(response: httpx.Response) -> None:
    """Free a response's connection: a small body is read to its end (`_DRAIN_LIMIT`), anything else closed unread.

    Reading a body to its end closes the response and keeps it readable: what both a response
    nobody will read (`discard`) and one given up on that may still be returned (a retry's wait
    cut short) need.
    """
    run_steps(_releasing(response, response.read, response.close))


async def release_async(response: httpx.Response) -> None:
    """`release` (and `discard`) for a response of an async transport."""
    await run_steps_async(_releasing(response, response.aread, response.aclose))


def _releasing(response: httpx.Response, read: Callable[[], Any], close: Callable[[], Any]) -> Steps[None]:
    """`release`'s steps, for both flavours: `read` and `close` are the response's methods or their async twins."""
    try:
        if not (response.is_stream_consumed or response.is_closed) and small_body(response.headers):
            yield read()
            return
    except Exception:  # unreadable after all: closing is what matters
        _logger.debug("reading a released response failed", exc_info=True)
    with contextlib.suppress(Exception):
        yield close()


def server_tags(method: str, host: str, port: int | None) -> dict[str, Any]:
    """OpenTelemetry's request tags: a known method by name (else "_OTHER"), the server's address and port."""
    tags: dict[str, Any] = {
        "http.request.method": method if method in _KNOWN_METHODS else "_OTHER",
        "server.address": host,
    }
    if port is not None:
        tags["server.port"] = port
    return tags


class _Exchange:
    """One request's state across its attempts (see the module docstring)."""

    __slots__ = ("_base_tags", "_live", "_lock", "clock", "extensions", "finished", "request")

    def __init__(self, request: httpx.Request, clock: TimeProvider, extensions: dict[str, Any] | None = None) -> None:
        self.request = request
        self.clock = clock
        # Each response an attempt produced and nobody discarded yet, with the flow (thread or
        # task) that produced it. Hedged attempts run in other flows at the same time.
        self._live: list[tuple[object, Any]] = []
        self._lock = threading.Lock()
        self.finished = False
        # The caller's, restored when no deadline applies (a client without extensions passes {}).
        self.extensions = request.extensions if extensions is None else extensions
        self._base_tags: dict[str, Any] | None = None

    def tags(self, event: EventFields) -> dict[str, Any]:
        """Extra metric tags of the events of this request (bounded cardinality only)."""
        base = self._base_tags
        if base is None:
            base = self._base_tags = self.server_tags()
        outcome = event.outcome
        value = None if outcome is None else outcome.value
        if is_response(value):
            return {**base, "http.response.status_code": value.status_code}
        return base

    def server_tags(self) -> dict[str, Any]:
        """The tags of every event of this request: its method, and the server's address and port."""
        url = self.request.url
        return server_tags(self.request.method, url.host, url.port)

    def enter(self) -> tuple[Any, Any]:
        """Publish the request (for the strategies) and the tags (for telemetry); returns the tokens."""
        request = self.request
        return REQUEST.set((request, authority(request.url))), CONTEXT_TAGS.set(self.tags)

    @staticmethod
    def leave(tokens: tuple[Any, Any]) -> None:
        """Undo `enter`."""
        REQUEST.reset(tokens[0])
        CONTEXT_TAGS.reset(tokens[1])

    def prepare(self) -> httpx.Request:
        """The request to send: the time left before the nearest HTTP timeout's deadline as its timeouts.

        Under HTTP hedging (`ABORTABLE`), a shallow copy of the request: a sync attempt is sent
        from a sender thread while others may be preparing theirs (they would overwrite each
        other's extensions).
        """
        request = self.request
        if ABORTABLE.get():  # the same stream (copy.copy would drop it: `__getstate__`) and headers; extensions below
            request = httpx.Request(request.method, request.url, headers=request.headers, stream=request.stream)
        cut = self.time_left()
        if cut is None:
            request.extensions = self.extensions
            return request
        original: dict[str, float | None] = self.extensions.get("timeout") or {}
        timeouts: dict[str, float | None] = {}
        for key in _TIMEOUT_KEYS:  # a loop, not a call per key: this runs on every attempt
            own = original.get(key)
            timeouts[key] = cut if own is None or own > cut else own
        # The common case (httpx's 5 s default under a 10 s attempt timeout): the client's own
        # timeouts are the shorter ones already, and the caller's extensions serve as they are.
        request.extensions = self.extensions if timeouts == original else {**self.extensions, "timeout": timeouts}
        return request

    def time_left(self) -> float | None:
        """The time left before the nearest HTTP timeout's deadline (at least `_MIN_TIMEOUT`); None without one."""
        deadline = DEADLINE.get()
        return None if deadline is None else max(deadline - self.clock.monotonic(), _MIN_TIMEOUT)

    def deadline_passed(self) -> bool:
        """Whether the nearest deadline is due (httpx's timeout may beat our timer)."""
        deadline = DEADLINE.get()
        return deadline is not None and self.clock.monotonic() >= deadline

    def add(self, flow: object, response: Any) -> bool:
        """Remember an attempt's response; False once the execution has ended (discard it then)."""
        with self._lock:
            if self.finished:
                return False
            self._live.append((flow, response))
            return True

    def take_earlier(self, flow: object) -> list[Any]:
        """The responses this flow produced before: a new attempt in it means they were given up.

        Only the same flow's: a hedged attempt starting in another thread or task must not
        close a response that may be about to win the race.
        """
        if not self._live:  # only this flow adds its own responses: none now means none to take
            return []
        with self._lock:
            live = self._live
            self._live = [entry for entry in live if entry[0] != flow]
            return [response for owner, response in live if owner == flow]

    def finish(self, keep: object = None) -> list[Any]:
        """The execution ended: every response but `keep`; later ones are refused by `add`."""
        with self._lock:
            self.finished = True
            live, self._live = self._live, []
        return [response for _, response in live if response is not keep]

    def send(self, pipeline: ResiliencePipeline, sender: Callable[[], R], timeouts: type[Exception]) -> R:
        """Run `attempt` of `sender` through `pipeline` with this request published; close every other response."""
        tokens = self.enter()
        response: R | None = None  # kept: the returned response; none when the pipeline raised
        try:
            # `attempt` is a module function: the pipeline checks a plain function fastest.
            response = pipeline.execute(attempt, self, sender, timeouts)
            return response
        finally:
            self.leave(tokens)
            for discarded in self.finish(keep=response):
                discard(discarded)


# Threads that send the requests of abortable sync attempts; idle ones are reused. Not capped:
# an abandoned send keeps its thread until httpx's own timeout (the attempt's deadline) or the
# answer ends it, and a cap would queue fresh attempts behind such losers. Idle for 30 s, a
# sender ends.
_SENDERS: Final = Pool("http-sender", sys.maxsize)
on_fork_in_child(_SENDERS._reset)  # the parent's senders do not exist in a child


def send_abortable(send: Callable[[], R]) -> R:
    """`send()` from a sender thread; raise the attempt signal's reason as soon as it aborts."""
    signal = _signal()
    answer: Future[R] = Future()
    # An abort cancels the answer unless it came: the attempt stops waiting, the sender discards it.
    remove = signal.add_wakeup(lambda _reason: answer.cancel())
    try:
        # The caller's contextvars (an OpenTelemetry span, say) go with the request.
        _SENDERS.submit(functools.partial(contextvars.copy_context().run, _send_into, answer, send))
        return answer.result()
    except CancelledError:
        if not answer.cancelled():
            raise  # the send's own error
    finally:
        remove()
    reason = signal.reason
    assert reason is not None  # only an abort cancels the answer
    raise reason


def _send_into(answer: Future[Any], send: Callable[[], Any]) -> None:
    """On a sender: `send()`, its response or error into `answer`; discarded if the attempt gave up."""
    try:
        response = send()
    except BaseException as exc:  # noqa: BLE001 - handed to the attempt, raised there
        with contextlib.suppress(InvalidStateError):  # the attempt gave up: nobody to raise it to
            answer.set_exception(exc)
        return
    try:
        answer.set_result(response)
    except InvalidStateError:  # the attempt is gone (lost the race, or timed out)
        discard(response)


def attempt(exchange: _Exchange, send: Callable[[], R], timeouts: type[Exception]) -> R:
    """One sync attempt of either client: `send()` (its timeout error `timeouts`) between the discards.

    The responses this flow produced before are discarded first; a response that answers after
    the execution ended is discarded too. `send()` reads the time left before the deadline when
    it is called, after the discards (a slow drain must not lengthen the client's timeout).
    """
    flow = threading.get_ident()
    for discarded in exchange.take_earlier(flow):
        discard(discarded)
    try:
        # Under HTTP hedging, sent from a sender thread so that a loser is abandoned at once.
        response = send_abortable(send) if ABORTABLE.get() else send()
    except timeouts:
        if exchange.deadline_passed():
            # The client's timeout, set to our deadline, beat the strategy's timer by a hair: let
            # the timer fire, so the timeout strategy reports it and a retry sees the abort.
            _signal().wait(_GRACE)
        raise
    if not exchange.add(flow, response):
        discard(response)  # a hedged attempt that lost, answered after the execution ended
    return response


def _handle(transport: httpx.BaseTransport, exchange: _Exchange) -> httpx.Response:
    """Send a sync request once (`attempt`'s `send`): prepared as it is sent, its timeouts the time left now."""
    request = exchange.prepare()
    response = transport.handle_request(request)
    response.request = request
    return response


async def _attempt_async(transport: httpx.AsyncBaseTransport, exchange: _Exchange) -> httpx.Response:
    """One attempt of an async request."""
    flow = asyncio.current_task()
    for discarded in exchange.take_earlier(flow):
        await release_async(discarded)
    # No copy (async hedging leaves `ABORTABLE` unset): httpx reads the extensions before its
    # first await, so no other attempt of this loop can change them in between.
    request = exchange.prepare()
    try:
        response = await transport.handle_async_request(request)
    except httpx.TimeoutException:
        if exchange.deadline_passed():
            await _signal().wait_async(_GRACE)  # see `attempt`
        raise
    response.request = request
    if not exchange.add(flow, response):
        await release_async(response)  # see `attempt`
    return response


class ResilientTransport(httpx.BaseTransport):
    """An httpx transport that sends every request through a resilience pipeline.

    `httpx.Client(transport=ResilientTransport(standard_pipeline()))`. Each attempt goes to
    `transport` (default: a fresh `httpx.HTTPTransport()`); its response is the attempt's
    outcome value and its errors propagate unchanged. Responses an attempt produced but the
    pipeline did not return are closed before the next attempt and at the end; the returned
    one is streamed as httpx would (never buffered).
    """

    def __init__(self, pipeline: ResiliencePipeline, transport: httpx.BaseTransport | None = None) -> None:
        self.pipeline = require_pipeline(pipeline, "ResilientTransport")
        self.transport = httpx.HTTPTransport() if transport is None else transport

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        """Send `request` through the pipeline; return the response it settles on."""
        exchange = _Exchange(request, self.pipeline.time_provider)
        send = functools.partial(_handle, self.transport, exchange)
        return exchange.send(self.pipeline, send, httpx.TimeoutException)

    def close(self) -> None:
        """Close the wrapped transport."""
        self.transport.close()

    def __repr__(self) -> str:
        return f"<ResilientTransport pipeline={self.pipeline!r}>"


class AsyncResilientTransport(httpx.AsyncBaseTransport):
    """The asyncio twin of `ResilientTransport`, for `httpx.AsyncClient`.

    Each attempt goes to `transport` (default: a fresh `httpx.AsyncHTTPTransport()`) and runs in
    the caller's task, so a timeout strategy cancels it at its deadline.
    """

    def __init__(self, pipeline: ResiliencePipeline, transport: httpx.AsyncBaseTransport | None = None) -> None:
        self.pipeline = require_pipeline(pipeline, "AsyncResilientTransport")
        self.transport = httpx.AsyncHTTPTransport() if transport is None else transport

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        """Send `request` through the pipeline; return the response it settles on."""
        exchange = _Exchange(request, self.pipeline.time_provider)
        tokens = exchange.enter()
        response: httpx.Response | None = None  # as in `_Exchange.send`
        try:
            response = await self.pipeline.execute_async(_attempt_async, self.transport, exchange)
            return response
        finally:
            exchange.leave(tokens)
            for discarded in exchange.finish(keep=response):
                await release_async(discarded)

    async def aclose(self) -> None:
        """Close the wrapped transport."""
        await self.transport.aclose()

    def __repr__(self) -> str:
        return f"<AsyncResilientTransport pipeline={self.pipeline!r}>"
