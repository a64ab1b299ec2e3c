"""Batched metrics: exact counts and durations at each collection, a buffer that stays bounded."""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from resilience import ResiliencePipeline, ResiliencePipelineBuilder
from resilience.telemetry import TelemetryOptions
from resilience.telemetry._otel import INSTRUMENTS, Batch
from resilience.testing import FakeTimeProvider
from tests.threads_support import race


def points(reader: InMemoryMetricReader) -> dict[str, list[Any]]:
    data = reader.get_metrics_data()
    found: dict[str, list[Any]] = {}
    if data is None:
        return found
    for resource in data.resource_metrics:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                found[metric.name] = list(metric.data.data_points)
    return found


def pipeline_on(provider: MeterProvider) -> ResiliencePipeline:
    return (
        ResiliencePipelineBuilder(
            name="batched", time_provider=FakeTimeProvider(), telemetry=TelemetryOptions(meter_provider=provider)
        )
        .add_retry(max_retries=1, delay=0)
        .build()
    )


def test_measurements_wait_for_the_collection_and_are_exact() -> None:
    """Durations and counts are buffered, then all of them are in the next collection, once."""
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    pipeline = pipeline_on(provider)
    for _ in range(25):
        pipeline.execute(lambda: 1)
    assert INSTRUMENTS.get(provider).batch._pending == 50  # 25 attempts + 25 executions
    first = points(reader)
    assert INSTRUMENTS.get(provider).batch._pending == 0
    assert [p.count for p in first["resilience.pipeline.duration"]] == [25]
    assert [p.count for p in first["resilience.strategy.attempt.duration"]] == [25]
    again = points(reader)  # cumulative: nothing is counted twice
    assert [p.count for p in again["resilience.pipeline.duration"]] == [25]


def test_the_flush_hook_never_appears_in_an_export() -> None:
    """The observable gauge that triggers the flush observes nothing, so no exporter shows it."""
    reader = InMemoryMetricReader()
    pipeline = pipeline_on(MeterProvider(metric_readers=[reader]))
    pipeline.execute(lambda: 1)
    assert all(name.startswith("resilience.") and "internal" not in name for name in points(reader))


def test_a_full_buffer_flushes_itself_without_a_collection() -> None:
    """A provider that never collects still gets every measurement: the buffer stays bounded."""
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    pipeline = pipeline_on(provider)
    batch = INSTRUMENTS.get(provider).batch
    batch.limit = 10
    for _ in range(200):
        pipeline.execute(lambda: 1)
    deadline = time.monotonic() + 10
    while batch._flushing and time.monotonic() < deadline:
        time.sleep(0.01)
    assert batch._pending < 4 * batch.limit
    assert [p.count for p in points(reader)["resilience.pipeline.duration"]] == [200]


def test_counts_are_exact_under_concurrency() -> None:
    """Eight threads recording at once: every measurement is counted exactly once."""
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    pipeline = pipeline_on(provider)
    INSTRUMENTS.get(provider).batch.limit = 64  # overflow flushes race the recorders

    def work() -> None:
        for _ in range(500):
            pipeline.execute(lambda: 1)

    threads = [threading.Thread(target=work) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert [p.count for p in points(reader)["resilience.pipeline.duration"]] == [4000]


class Broken:
    def add(self, amount: int, attributes: dict[str, Any]) -> None:
        raise RuntimeError("exporter down")


def test_a_failing_instrument_is_logged_not_raised(caplog: pytest.LogCaptureFixture) -> None:
    """A provider whose instrument raises never breaks the thread that flushes."""
    batch = Batch()
    batch.record(("k",), Broken(), dict, 1, counted=True)  # type: ignore[arg-type]
    with caplog.at_level(logging.ERROR, logger="resilience"):
        batch.flush()
    assert "recording metrics in OpenTelemetry failed" in caplog.text
    batch.flush()  # nothing pending: a no-op


class Slow:
    def __init__(self) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()
        self.totals: list[int] = []

    def add(self, amount: int, attributes: dict[str, Any]) -> None:
        self.entered.set()
        self.release.wait(5)
        self.totals.append(amount)


def test_a_collection_waits_for_a_flush_in_progress() -> None:
    """A flush that returns has seen every earlier flush finish: a collection misses nothing recorded before it."""
    batch = Batch()
    slow = Slow()
    batch.record(("a",), slow, dict, 1, counted=True)  # type: ignore[arg-type]
    background = threading.Thread(target=batch.flush)
    background.start()
    assert slow.entered.wait(5)
    batch.record(("b",), slow, dict, 1, counted=True)  # type: ignore[arg-type]
    threading.Timer(0.05, slow.release.set).start()
    batch.flush(wait=5)  # as a collection does
    assert slow.totals == [1, 1]
    background.join()


def test_a_collection_does_not_wait_forever_for_a_stuck_flush() -> None:
    """The wait is bounded: a stuck flush delays a collection, never blocks it."""
    batch = Batch()
    slow = Slow()
    batch.record(("a",), slow, dict, 1, counted=True)  # type: ignore[arg-type]
    background = threading.Thread(target=batch.flush)
    background.start()
    assert slow.entered.wait(5)
    batch.record(("b",), slow, dict, 1, counted=True)  # type: ignore[arg-type]
    batch.flush(wait=0.01)
    assert batch._pending == 1  # left for the next collection
    slow.release.set()
    background.join()
    batch.flush()
    assert slow.totals == [1, 1]


class Tally:
    """An instrument that adds up what it is handed (a counter's amounts, a histogram's values)."""

    def __init__(self) -> None:
        self.total = 0
        self._lock = threading.Lock()

    def add(self, amount: int, attributes: dict[str, Any]) -> None:
        with self._lock:
            self.total += amount

    def record(self, value: float, attributes: dict[str, Any]) -> None:
        with self._lock:
            self.total += 1


def test_no_measurement_falls_between_a_flush_and_the_buffer_it_empties() -> None:
    """Flushes swap the buffer for an empty one while eight threads add to it, thread switches
    as often as the interpreter allows: a measurement added to the buffer a flush already took
    would be lost."""
    counter, histogram = Tally(), Tally()
    batch = Batch()
    batch.limit = 2  # a flush every other measurement

    def work() -> None:
        for _ in range(4000):
            batch.record(("c",), counter, dict, 1, counted=True)  # type: ignore[arg-type]
            batch.record(("h",), histogram, dict, 1.0)  # type: ignore[arg-type]

    race(work)
    batch.flush()
    assert (counter.total, histogram.total) == (32_000, 32_000)
