"""Type-checked, never run: the HTTP integration's public signatures."""

import httpx

from resilience import ResiliencePipeline
from resilience.http import (
    AsyncResilientTransport,
    HttpRetryStrategyOptions,
    ResilientTransport,
    http_retry_strategy,
    is_transient,
    parse_retry_after,
    standard_pipeline,
)


def build() -> None:
    pipeline: ResiliencePipeline = standard_pipeline(name="api", total_timeout=10, max_retries=2)
    client = httpx.Client(transport=ResilientTransport(pipeline))
    aclient = httpx.AsyncClient(transport=AsyncResilientTransport(pipeline, httpx.AsyncHTTPTransport()))
    options: HttpRetryStrategyOptions = http_retry_strategy(handle=is_transient, retry_unsafe_methods=True)
    delay: float | None = parse_retry_after(httpx.Response(429), 0.0)
    del client, aclient, options, delay
