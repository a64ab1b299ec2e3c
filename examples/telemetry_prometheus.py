"""Telemetry to Prometheus: a pipeline's events and timings on a /metrics endpoint.

Run it with --serve, then open the /metrics address it prints (or point Prometheus and the
Grafana dashboard in docs/dashboards/resilience.json at it); it repeats the workload every few
seconds, so the dashboard moves, until you press Ctrl-C:

    .venv/bin/python examples/telemetry_prometheus.py --port 9464 --serve

Without --serve it runs the workload once, prints the address and exits (what `make demo` does).
"""

from __future__ import annotations

import argparse
import itertools
import threading
import time

from opentelemetry import metrics
from opentelemetry.exporter.prometheus import PrometheusMetricReader
from opentelemetry.sdk.metrics import MeterProvider
from prometheus_client import start_http_server

from resilience import LockNotAcquiredError, ResiliencePipelineBuilder, TimeoutRejectedError, get_context
from resilience.stores import MemoryLockStore


def install_prometheus(port: int) -> int:
    """Serve /metrics and make the OpenTelemetry SDK export through it; return the port."""
    server, _thread = start_http_server(port, addr="127.0.0.1")
    metrics.set_meter_provider(MeterProvider(metric_readers=[PrometheusMetricReader()]))
    return int(server.server_port)


def workload() -> None:
    """Exercise retry, circuit breaker, timeout and lock so that every metric has samples."""
    store = MemoryLockStore()
    pipeline = (
        ResiliencePipelineBuilder(name="checkout", instance_name="demo")
        .add_lock("checkout-batch", ttl=5, store=store)
        .add_retry(max_retries=2, delay=0.01, handle=ConnectionError)
        .add_circuit_breaker(failure_ratio=0.5, minimum_throughput=4, break_duration=0.2, handle=ConnectionError)
        .add_timeout(1)
        .build()
    )
    calls = itertools.count()

    def flaky() -> str:
        if next(calls) % 3 == 0:
            raise ConnectionError("payment gateway reset the connection")
        time.sleep(0.002)
        return "ok"

    for _ in range(12):
        pipeline.settle(flaky)

    def always_down() -> str:
        raise ConnectionError("payment gateway is down")

    for _ in range(6):  # opens the circuit, then gets rejected
        pipeline.settle(always_down)

    # A sync callable that honours its signal: the timeout aborts it at 20 ms (OnTimeout).
    def cooperative() -> str:
        context = get_context()
        assert context is not None
        context.signal.wait(1)
        context.signal.raise_if_aborted()
        return "too late"

    quick = ResiliencePipelineBuilder(name="quote", instance_name="demo").add_timeout(0.02).build()
    assert isinstance(quick.settle(cooperative).error, TimeoutRejectedError)

    # Two contenders on one key: one holds it, the other is rejected (OnLockRejected).
    batch = ResiliencePipelineBuilder(name="batch", instance_name="demo").add_lock("nightly", store=store).build()
    holding = threading.Event()
    done = threading.Event()

    def hold() -> None:
        holding.set()
        done.wait(5)

    holder = threading.Thread(target=batch.settle, args=(hold,))
    holder.start()
    holding.wait(5)
    outcome = batch.settle(lambda: "never runs")
    assert isinstance(outcome.error, LockNotAcquiredError)
    done.set()
    holder.join()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--port", type=int, default=0, help="0 (the default): any free port")
    parser.add_argument("--serve", action="store_true", help="keep serving, repeating the workload, until Ctrl-C")
    parser.add_argument("--interval", type=float, default=5.0, help="seconds between workloads with --serve")
    parser.add_argument("--serve-seconds", type=float, default=0.0, help="without --serve: keep serving this long")
    args = parser.parse_args()
    port = install_prometheus(args.port)
    workload()
    print(f"workload done; metrics at http://127.0.0.1:{port}/metrics", flush=True)
    if not args.serve:
        time.sleep(args.serve_seconds)
        return
    print("serving; press Ctrl-C to stop", flush=True)
    try:
        for round_number in itertools.count(2):
            time.sleep(args.interval)
            workload()
            print(f"workload {round_number} done", flush=True)
    except KeyboardInterrupt:
        print("stopped", flush=True)


if __name__ == "__main__":
    main()
