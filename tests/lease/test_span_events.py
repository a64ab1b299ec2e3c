"""`OnLockLost` becomes a span event on the execution's span, sync and async (issue #11).

The loss is noticed off the execution's thread (the timer, a store's thread, a loop callback);
the event is emitted in the execution's own context, so it lands on the span that was current
when the execution ran.
"""

from __future__ import annotations

import uuid

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from resilience import ResiliencePipelineBuilder, get_context
from resilience.stores import MemoryLockStore
from resilience.telemetry import TelemetryOptions


class AnsweringFalse(MemoryLockStore):
    def renew(self, key: str, owner: str, ttl: float) -> bool:
        return False


def _setup() -> tuple[InMemorySpanExporter, TracerProvider, object]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    pipeline = (
        ResiliencePipelineBuilder(telemetry=TelemetryOptions(tracer_provider=provider))
        .add_lock(f"span-{uuid.uuid4().hex}", ttl=0.3, store=AnsweringFalse())
        .build()
    )
    return exporter, provider, pipeline


def test_sync_on_lock_lost_is_a_span_event() -> None:
    exporter, provider, pipeline = _setup()

    def body() -> None:
        context = get_context()
        assert context is not None
        assert context.signal.wait(3)

    with provider.get_tracer("test").start_as_current_span("request"):
        pipeline.execute(body)  # type: ignore[attr-defined]
    (span,) = exporter.get_finished_spans()
    assert [e.name for e in span.events].count("OnLockLost") == 1


async def test_async_on_lock_lost_is_a_span_event() -> None:
    exporter, provider, pipeline = _setup()

    async def body() -> None:
        context = get_context()
        assert context is not None
        assert await context.signal.wait_async(3)

    with provider.get_tracer("test").start_as_current_span("request"):
        await pipeline.execute_async(body)  # type: ignore[attr-defined]
    (span,) = exporter.get_finished_spans()
    assert [e.name for e in span.events].count("OnLockLost") == 1
