"""What telemetry costs on the success path: retry + circuit breaker + timeout, sync and async.

Three modes, interleaved round by round in one process:

- "OpenTelemetry not imported": nothing has imported `opentelemetry.metrics`/`.trace`, so no
  SDK can be installed (the library checks `sys.modules`);
- "API imported, no SDK": the API modules are loaded (as in most instrumented apps) but no SDK
  provider is installed;
- "SDK meter provider": `TelemetryOptions(meter_provider=MeterProvider(...))` with an
  in-memory reader, so every event is recorded.

Targets: with no SDK, telemetry costs under 30% of the pipeline's own overhead; with an SDK
meter provider the sync stack costs at most 2x its cost without one.

Measurements are batched and handed to the SDK when the reader collects (or when the buffer
fills, by a short-lived thread), so the time on the calling thread and the total CPU differ:
the last table also gives the process CPU per call for the SDK mode, the flush included.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from resilience import PipelineBuilder, ResilienceContext, ResiliencePipeline, ResiliencePipelineBuilder
from resilience.telemetry import Severity, TelemetryOptions


class PassThrough:
    def execute(self, callback: Any, context: ResilienceContext) -> Any:
        return callback(context)

    async def execute_async(self, callback: Any, context: ResilienceContext) -> Any:
        return await callback(context)


def stack(telemetry: TelemetryOptions | None = None) -> ResiliencePipeline:
    return (
        ResiliencePipelineBuilder(name="bench", telemetry=telemetry)
        .add_retry(max_retries=3, delay=0.1, handle=ConnectionError)
        .add_circuit_breaker(failure_ratio=0.5, minimum_throughput=10)
        .add_timeout(30.0)
        .build()
    )


def work() -> int:
    return 1


async def awork() -> int:
    return 1


def per_call_sync(pipeline: ResiliencePipeline, loops: int) -> float:
    execute = pipeline.execute
    start = time.perf_counter()
    for _ in range(loops):
        execute(work)
    return (time.perf_counter() - start) / loops


def per_call_async(pipeline: ResiliencePipeline, loops: int) -> float:
    async def run() -> float:
        execute = pipeline.execute_async
        start = time.perf_counter()
        for _ in range(loops):
            await execute(awork)
        return (time.perf_counter() - start) / loops

    return asyncio.run(run())


def thread_cpu_sync(pipeline: ResiliencePipeline, loops: int) -> float:
    """CPU time of the calling thread per call (robust to other processes' load)."""
    execute = pipeline.execute
    start = time.thread_time()
    for _ in range(loops):
        execute(work)
    return (time.thread_time() - start) / loops


def cpu_sync_with_flush(pipeline: ResiliencePipeline, reader: Any, loops: int) -> float:
    """Process CPU per call, including handing every buffered measurement to the SDK."""
    execute = pipeline.execute
    start = time.process_time()
    for _ in range(loops):
        execute(work)
    reader.get_metrics_data()  # a collection flushes what is still buffered
    return (time.process_time() - start) / loops


def plain_sync(loops: int) -> float:
    start = time.perf_counter()
    for _ in range(loops):
        work()
    return (time.perf_counter() - start) / loops


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--loops", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()

    import opentelemetry.metrics
    import opentelemetry.trace
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    hidden = {name: sys.modules[name] for name in ("opentelemetry.metrics", "opentelemetry.trace")}
    assert opentelemetry.metrics
    assert opentelemetry.trace

    reader = InMemoryMetricReader()
    sdk = TelemetryOptions(meter_provider=MeterProvider(metric_readers=[reader]))
    silenced = TelemetryOptions(severity_provider=lambda _event: Severity.NONE)
    pipelines = {
        "not imported": stack(),
        "API, no SDK": stack(),
        "SDK meter provider": stack(sdk),
        "severity NONE for all": stack(silenced),
    }
    floor = PipelineBuilder().add(PassThrough()).add(PassThrough()).add(PassThrough()).build()
    samples: dict[str, list[float]] = {f"{mode} {name}": [] for name in pipelines for mode in ("sync", "async")}
    samples["sync plain call"] = []
    samples["sync SDK meter provider, CPU incl. flush"] = []
    samples["sync not imported, CPU"] = []
    samples["sync SDK meter provider, calling thread CPU"] = []
    samples["sync not imported, calling thread CPU"] = []
    samples["sync 3 pass-through strategies"] = []
    for _ in range(args.rounds):
        for name, pipeline in pipelines.items():
            if name == "not imported":
                for module in hidden:
                    del sys.modules[module]
            try:
                samples[f"sync {name}"].append(per_call_sync(pipeline, args.loops))
                samples[f"async {name}"].append(per_call_async(pipeline, args.loops))
            finally:
                sys.modules.update(hidden)
        samples["sync plain call"].append(plain_sync(args.loops))
        samples["sync SDK meter provider, CPU incl. flush"].append(
            cpu_sync_with_flush(pipelines["SDK meter provider"], reader, args.loops)
        )
        samples["sync SDK meter provider, calling thread CPU"].append(
            thread_cpu_sync(pipelines["SDK meter provider"], args.loops)
        )
        for module in hidden:
            del sys.modules[module]
        try:
            samples["sync not imported, calling thread CPU"].append(
                thread_cpu_sync(pipelines["not imported"], args.loops)
            )
            samples["sync not imported, CPU"].append(cpu_sync_with_flush(pipelines["not imported"], reader, args.loops))
        finally:
            sys.modules.update(hidden)
        samples["sync 3 pass-through strategies"].append(per_call_sync(floor, args.loops))
    medians = {name: statistics.median(values) for name, values in samples.items()}
    print(f"{args.rounds} interleaved rounds of {args.loops:,} calls; medians per call\n")
    print("| case | µs per call |\n|---|---:|")
    for name, value in medians.items():
        print(f"| {name} | {value * 1e6:.2f} |")
    print(
        f"\nsync with an SDK: {medians['sync SDK meter provider'] / medians['sync not imported']:.2f}x in wall time, "
        f"{medians['sync SDK meter provider, calling thread CPU'] / medians['sync not imported, calling thread CPU']:.2f}x "
        "in the calling thread's CPU, "
        f"{medians['sync SDK meter provider, CPU incl. flush'] / medians['sync not imported, CPU']:.2f}x "
        "in process CPU with the flush (target 2x)"
    )
    for mode in ("sync", "async"):
        base = medians[f"{mode} not imported"]
        print(
            f"\n{mode}: API without SDK costs {100 * (medians[f'{mode} API, no SDK'] / base - 1):+.1f}% "
            f"and an SDK meter provider {100 * (medians[f'{mode} SDK meter provider'] / base - 1):+.1f}% "
            f"over the pipeline with OpenTelemetry not imported"
        )


if __name__ == "__main__":
    main()
