"""resilience: Polly-style resilience pipelines for Python, sync and asyncio.

Compose strategies with a builder (the first added is the outermost), then run callables
through the pipeline, from sync code or asyncio:

    from resilience import ResiliencePipelineBuilder, get_lock_token

    pipeline = (
        ResiliencePipelineBuilder(name="orders")
        .add_lock(lambda ctx: f"order:{ctx.operation_key}", ttl=30)  # a lease, renewed in the background
        .add_retry(max_retries=3, delay=0.2, backoff="exponential", handle=ConnectionError)
        .add_circuit_breaker(failure_ratio=0.5, minimum_throughput=10)
        .add_timeout(10)
        .build()
    )
    receipt = pipeline.execute(charge, order_id)          # or settle(...) -> Ok | Err
    receipt = await pipeline.execute_async(acharge, order_id)

Inside a lock, `get_lock_token()` is the lease's fencing token. Options are validated at
`build()` (one `ValidationError` listing every problem).

Public modules:
    resilience.strategies  the strategies' factories, options and callback arguments
    resilience.primitives  lock() and semaphore() for code without a pipeline
    resilience.stores      lock and semaphore stores: memory, Redis (standalone and Cluster)
    resilience.limiters    rate-limit stores: memory, Redis (standalone and Cluster)
    resilience.telemetry   TelemetryOptions, TelemetryEvent, Severity (OpenTelemetry export)
    resilience.exceptions  the error tree (all re-exported here)
    resilience.testing     FakeTimeProvider, capture_events
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
