"""resilience: Polly-style resilience pipelines for Python, sync and asyncio.

Compose strategies with a builder (the first added is the outermost), then run callables
through the pipeline, from sync code or asyncio:

    from resilience import ResiliencePipelineBuilder, get_lock_token, use_context
    from resilience.stores import RedisLockStore, redis_client

    client = redis_client("redis://localhost:6379/0")  # short socket timeouts, one retry

    pipeline = (
        ResiliencePipelineBuilder(name="orders")
        # one lease per order, in Redis, renewed in the background (without store=: this process only)
        .add_lock(lambda ctx: f"order:{ctx.operation_key}", ttl=30, store=RedisLockStore(client))
        .add_retry(max_retries=3, delay=0.2, backoff="exponential", handle=ConnectionError)
        .add_circuit_breaker(failure_ratio=0.5, minimum_throughput=10)
        .add_timeout(10)
        .build()
    )

    @pipeline(operation_key=lambda order_id: order_id)  # each call locks order:<its order_id>
    def charge(order_id: str) -> str:
        return f"charged {order_id} with fencing token {get_lock_token()}"

    def refund(order_id: str) -> str:
        return f"refunded {order_id}"

    charge("42")
    with use_context(operation_key="43"):  # the same for execute, settle and their _async twins
        pipeline.execute(refund, "43")

Inside a lock, `get_lock_token()` is the lease's fencing token. Options are validated at
`build()` (one `ValidationError` listing every problem). `settle(...)` returns `Ok | Err`
instead of raising; `execute_outcome(...)` runs a function that itself returns `Ok | Err`.

Public modules:
    resilience.strategies  the strategies' factories, options and callback arguments
    resilience.primitives  lock() and semaphore() for code without a pipeline
    resilience.stores      lock and semaphore stores: memory, Redis (standalone and Cluster), PostgreSQL
    resilience.limiters    rate-limit stores: memory, Redis (standalone and Cluster)
    resilience.telemetry   TelemetryOptions, TelemetryEvent, Severity (OpenTelemetry export)
    resilience.exceptions  the error tree (all re-exported here)
    resilience.testing     FakeTimeProvider, capture_events
    resilience.http        resilient httpx transports and the standard HTTP pipelines (extra [http])
    resilience.http.requests  the same for a requests.Session: ResilientHTTPAdapter (extra [requests])
"""

from resilience._builder import PipelineBuilder, ResiliencePipelineBuilder
from resilience._context import (
    LOCK_TOKEN,
    ResilienceContext,
    ResilienceProperties,
    ResiliencePropertyKey,
    get_context,
    get_lock_token,
    use_context,
)
from resilience._outcome import Err, Ok, Outcome
from resilience._pipeline import PipelineExecutedArguments, ResiliencePipeline
from resilience._registry import ResiliencePipelineRegistry
from resilience._signal import CancelScope, Signal
from resilience._time import SystemTimeProvider, TimeProvider, TimerHandle
from resilience._validation import Duration
from resilience._version import __version__ as __version__
from resilience.exceptions import (
    BrokenCircuitError,
    IsolatedCircuitError,
    LockLeaseLostError,
    LockLostError,
    LockNotAcquiredError,
    OperationAbortedError,
    RateLimiterRejectedError,
    RejectedError,
    ResilienceError,
    SemaphoreLeaseLostError,
    TimeoutRejectedError,
    ValidationError,
    is_rejection,
)

__all__ = [
    "LOCK_TOKEN",
    "BrokenCircuitError",
    "CancelScope",
    "Duration",
    "Err",
    "IsolatedCircuitError",
    "LockLeaseLostError",
    "LockLostError",
    "LockNotAcquiredError",
    "Ok",
    "OperationAbortedError",
    "Outcome",
    "PipelineBuilder",
    "PipelineExecutedArguments",
    "RateLimiterRejectedError",
    "RejectedError",
    "ResilienceContext",
    "ResilienceError",
    "ResiliencePipeline",
    "ResiliencePipelineBuilder",
    "ResiliencePipelineRegistry",
    "ResilienceProperties",
    "ResiliencePropertyKey",
    "SemaphoreLeaseLostError",
    "Signal",
    "SystemTimeProvider",
    "TimeProvider",
    "TimeoutRejectedError",
    "TimerHandle",
    "ValidationError",
    "get_context",
    "get_lock_token",
    "is_rejection",
    "use_context",
]
