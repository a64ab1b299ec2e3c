"""An HTTP client that honours Retry-After, behind retry + circuit breaker + timeout.

A local test server answers 503 with `Retry-After` a few times, then 200; then it goes down
for good, and the circuit opens so that callers fail fast instead of piling up.
"""

from __future__ import annotations

import http.server
import threading
import urllib.error
import urllib.request
from dataclasses import dataclass

from resilience import BrokenCircuitError, ResiliencePipelineBuilder, get_context
from resilience.strategies import OnRetryArguments, RetryDelayArguments


@dataclass(frozen=True)
class Response:
    status: int
    headers: dict[str, str]
    body: str


class Script(http.server.BaseHTTPRequestHandler):
    """503 + Retry-After twice, then 200; after `/down` is hit, always 500."""

    busy_left = 2
    down = False

    def do_GET(self) -> None:
        cls = type(self)
        if self.path == "/down":
            cls.down = True
        if cls.down:
            self._reply(500, "upstream exploded")
        elif cls.busy_left > 0:
            cls.busy_left -= 1
            self._reply(503, "busy", {"Retry-After": "0.05"})
        else:
            self._reply(200, "price: 42.00")

    def _reply(self, status: int, body: str, headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body.encode())

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002, ARG002 - the stdlib signature; silence the log
        return


def get(url: str) -> Response:
    """One HTTP GET; the socket timeout is what is left of the pipeline's deadline (if any)."""
    context = get_context()
    if context is not None:
        context.signal.raise_if_aborted()
    try:
        with urllib.request.urlopen(url, timeout=2) as reply:  # noqa: S310 - our own local test server
            return Response(reply.status, dict(reply.headers), reply.read().decode())
    except urllib.error.HTTPError as error:
        return Response(error.code, dict(error.headers), error.read().decode())


def retryable(response: Response) -> bool:
    return response.status in {429, 502, 503, 504}


def retry_after(args: RetryDelayArguments) -> float | None:
    """A server's Retry-After (seconds) wins over the backoff; `max_delay` still caps it."""
    response = args.outcome.value
    if isinstance(response, Response) and "Retry-After" in response.headers:
        return float(response.headers["Retry-After"])
    return None


def show_retry(args: OnRetryArguments) -> None:
    what = args.outcome.value.status if args.outcome.value is not None else repr(args.outcome.error)
    print(f"  attempt {args.attempt} got {what}; retrying in {args.delay:.2f}s")


class ServerError(Exception):
    """A 5xx that is not worth retrying, but counts against the circuit."""


def get_or_raise(url: str) -> Response:
    response = get(url)
    if response.status >= 500 and not retryable(response):
        raise ServerError(f"{response.status}: {response.body}")
    return response


def main() -> None:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Script)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    pipeline = (
        ResiliencePipelineBuilder(name="prices")
        .add_retry(
            max_retries=3,
            delay=0.5,
            backoff="exponential",
            max_delay=1.0,
            handle=(ConnectionError, TimeoutError),
            handle_result=retryable,
            delay_generator=retry_after,
            on_retry=show_retry,
        )
        .add_circuit_breaker(failure_ratio=0.3, minimum_throughput=5, break_duration=5, handle=ServerError)
        .add_timeout(3)
        .build()
    )
    try:
        print("1. the server is busy twice, with Retry-After: 0.05")
        response = pipeline.execute(get_or_raise, f"{base}/price")
        print(f"  -> {response.status} {response.body}")

        print("2. the server goes down: two failures in five calls open the circuit")
        for path in ("/down", "/price"):
            outcome = pipeline.settle(get_or_raise, f"{base}{path}")
            print(f"  -> {type(outcome.error).__name__}: {outcome.error}")
        outcome = pipeline.settle(get_or_raise, f"{base}/price")
        assert isinstance(outcome.error, BrokenCircuitError)
        print(f"  -> rejected without a request: {outcome.error} (retry after {outcome.error.retry_after:.1f}s)")
    finally:
        server.shutdown()
        server.server_close()


if __name__ == "__main__":
    main()
