"""resilience: Polly-style resilience pipelines for Python, sync and asyncio.

Build a pipeline of strategies (first added = outermost) and run callables through it:

    from resilience import ResiliencePipelineBuilder

    pipeline = ResiliencePipelineBuilder(name="orders").build()
    pipeline.execute(charge, order_id)

Public modules: `resilience.strategies`, `resilience.telemetry`, `resilience.exceptions`,
`resilience.testing`.
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
    "RejectedError",
    "ResilienceContext",
    "ResilienceError",
    "ResiliencePipeline",
    "ResiliencePipelineBuilder",
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
