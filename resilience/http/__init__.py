"""HTTP: resilient httpx transports and .NET's standard resilience and hedging pipelines (extra `[http]`).

    import httpx
    from resilience.http import ResilientTransport, standard_pipeline

    client = httpx.Client(transport=ResilientTransport(standard_pipeline(name="github")))
    response = client.get("https://api.github.com/zen")

Every request runs through the pipeline; each attempt's `httpx.Response` is the outcome's
value and transport errors propagate unchanged. The HTTP strategies handle transport errors,
attempt timeouts, 408, 429 and 5xx; retry only idempotent methods (or a request that opts in);
wait what `Retry-After` says; close every response they give up on; and hand httpx the time
left before the attempt's deadline. Events carry `http.request.method`, `server.address`,
`server.port` and `http.response.status_code` tags.
"""

from resilience.http._classify import (
    IDEMPOTENT_METHODS,
    RETRY_EXTENSION,
    current_request,
    is_transient,
    parse_retry_after,
    retry_allowed,
)
from resilience.http._hedging import HttpHedging, HttpHedgingStrategyOptions, http_hedging_strategy, is_hedgeable
from resilience.http._standard import request_authority, standard_hedging_pipeline, standard_pipeline
from resilience.http._strategies import (
    AuthorityCircuitBreaker,
    HttpCircuitBreakerStrategyOptions,
    HttpRetryStrategyOptions,
    HttpTimeoutStrategyOptions,
    http_circuit_breaker_strategy,
    http_retry_strategy,
    http_timeout_strategy,
)
from resilience.http._transport import AsyncResilientTransport, ResilientTransport

__all__ = [
    "IDEMPOTENT_METHODS",
    "RETRY_EXTENSION",
    "AsyncResilientTransport",
    "AuthorityCircuitBreaker",
    "HttpCircuitBreakerStrategyOptions",
    "HttpHedging",
    "HttpHedgingStrategyOptions",
    "HttpRetryStrategyOptions",
    "HttpTimeoutStrategyOptions",
    "ResilientTransport",
    "current_request",
    "http_circuit_breaker_strategy",
    "http_hedging_strategy",
    "http_retry_strategy",
    "http_timeout_strategy",
    "is_hedgeable",
    "is_transient",
    "parse_retry_after",
    "request_authority",
    "retry_allowed",
    "standard_hedging_pipeline",
    "standard_pipeline",
]
