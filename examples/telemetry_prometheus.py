"""Telemetry to Prometheus: pipelines' events, timings and state on a /metrics endpoint.

The pipelines exercise every signal of the Grafana dashboard and the alerts of
docs/dashboards/alerts.yml (a lease is lost every round: the page fires). Run it with --serve, then open the /metrics address it prints (or point Prometheus and the
Grafana dashboard in docs/dashboards/resilience.json at it); it repeats the workload every few
seconds, so the dashboard moves, until you press Ctrl-C (it stops after the workload under way;
a second Ctrl-C interrupts at once):

    .venv/bin/python examples/telemetry_prometheus.py --port 9464 --serve

Without --serve it runs the workload once, prints the address and exits (what `make demo` does).
"""

from __future__ import annotations

import argparse
import itertools
import signal
import threading
import time

from opentelemetry import metrics
from opentelemetry.exporter.prometheus import PrometheusMetricReader
from opentelemetry.sdk.metrics import MeterProvider
from prometheus_client import start_http_server

from resilience import (
    LockNotAcquiredError,
    RateLimiterRejectedError,
    ResiliencePipeline,
    ResiliencePipelineBuilder,
    TimeoutRejectedError,
    get_context,
)
from resilience.stores import MemoryLockStore


def install_prometheus(port: int) -> int:
    """Serve /metrics and make the OpenTelemetry SDK export through it; return the port."""
    server, _thread = start_http_server(port, addr="127.0.0.1")
    metrics.set_meter_provider(MeterProvider(metric_readers=[PrometheusMetricReader()]))
    return int(server.server_port)


class LosingStore(MemoryLockStore):
    """A lock store whose renewals fail once (a network blip), then answer that the lease is gone."""

    def __init__(self) -> None:
        super().__init__()
        self._renewals = itertools.count()

    def renew(self, key: str, owner: str, ttl: float) -> bool:  # noqa: ARG002 - the store's signature
        if next(self._renewals) % 2 == 0:
            raise ConnectionError("lock store timed out")
        return False


class Workload:
    """Pipelines built once (so the state metrics follow them), and one round of work over them.

    A round exercises every signal of the Grafana dashboard: retries, an open circuit,
    timeouts, lock contention and a lost lease, rate-limiter and concurrency-limiter
    rejections, hedging, fallback and an injected fault. Two background holders keep a lock
    and a limiter permit held, so the "now" panels are not all zero.
    """

    def __init__(self) -> None:
        store = MemoryLockStore()
        builder = ResiliencePipelineBuilder
        self.checkout = (
            builder(name="checkout", instance_name="demo")
            .add_lock("checkout-batch", ttl=5, store=store)
            .add_retry(max_retries=2, delay=0.01, handle=ConnectionError)
            .add_circuit_breaker(failure_ratio=0.5, minimum_throughput=4, break_duration=0.2, handle=ConnectionError)
            .add_timeout(1)
            .build()
        )
        # Opened by the first round and kept open: its break outlasts any demo.
        self.inventory = (
            builder(name="inventory", instance_name="demo")
            .add_circuit_breaker(failure_ratio=0.5, minimum_throughput=2, break_duration=3600, handle=ConnectionError)
            .build()
        )
        self.quote = builder(name="quote", instance_name="demo").add_timeout(0.02).build()
        self.batch = builder(name="batch", instance_name="demo").add_lock("nightly", store=store).build()
        self.report = (
            builder(name="report", instance_name="demo").add_lock("report", ttl=0.3, store=LosingStore()).build()
        )
        self.api = builder(name="api", instance_name="demo").add_rate_limiter(5, per=1).build()
        self.pool = builder(name="pool", instance_name="demo").add_concurrency_limiter(1, queue=1, wait=0.05).build()
        self.search = builder(name="search", instance_name="demo").add_hedging(delay=0.005).build()
        self.prices = (
            builder(name="prices", instance_name="demo")
            .add_fallback(lambda _: "cached price", handle=ConnectionError)
            .add_chaos_fault(injection_rate=1.0, fault=ConnectionError("injected by chaos"))
            .build()
        )
        self._calls = itertools.count()
        self._holders = [self._hold(self.batch), self._hold(self.pool)]

    @staticmethod
    def _hold(pipeline: ResiliencePipeline) -> threading.Thread:
        """Hold the pipeline's lock or permit on a daemon thread until the process exits."""
        holding = threading.Event()

        def hold_forever() -> None:
            holding.set()
            threading.Event().wait()

        holder = threading.Thread(target=pipeline.settle, args=(hold_forever,), daemon=True)
        holder.start()
        holding.wait(5)
        return holder

    def run(self) -> None:
        """One round."""

        def flaky() -> str:
            if next(self._calls) % 3 == 0:
                raise ConnectionError("payment gateway reset the connection")
            time.sleep(0.002)
            return "ok"

        def always_down() -> str:
            raise ConnectionError("payment gateway is down")

        for _ in range(12):
            self.checkout.settle(flaky)
        for _ in range(6):  # opens the circuit, then gets rejected
            self.checkout.settle(always_down)
        for _ in range(3):
            self.inventory.settle(always_down)

        # A sync callable that honours its signal: the timeout aborts it at 20 ms (OnTimeout).
        def cooperative() -> str:
            context = get_context()
            assert context is not None
            context.signal.wait(1)
            context.signal.raise_if_aborted()
            return "too late"

        assert isinstance(self.quote.settle(cooperative).error, TimeoutRejectedError)
        # The key is held by the background holder: rejected (OnLockRejected).
        assert isinstance(self.batch.settle(lambda: "never runs").error, LockNotAcquiredError)

        # The store fails a renewal, then says the lease is gone (OnLockRenewalFailed, OnLockLost).
        def until_lost() -> None:
            context = get_context()
            assert context is not None
            context.signal.wait(2)

        self.report.settle(until_lost)
        for _ in range(8):  # 5 a second: the rest are rejected
            self.api.settle(lambda: "ok")
        # The permit is held in the background: the caller queues, then is rejected.
        assert isinstance(self.pool.settle(lambda: "never runs").error, RateLimiterRejectedError)
        self.search.execute(lambda: time.sleep(0.02))  # slower than the hedging delay (OnHedging)
        assert self.prices.execute(lambda: "fresh price") == "cached price"  # chaos fault, fallback


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--port", type=int, default=0, help="0 (the default): any free port")
    parser.add_argument("--serve", action="store_true", help="keep serving, repeating the workload, until Ctrl-C")
    parser.add_argument("--interval", type=float, default=5.0, help="seconds between workloads with --serve")
    parser.add_argument("--serve-seconds", type=float, default=0.0, help="without --serve: keep serving this long")
    args = parser.parse_args()
    port = install_prometheus(args.port)
    workload = Workload()
    workload.run()
    print(f"workload done; metrics at http://127.0.0.1:{port}/metrics", flush=True)
    if not args.serve:
        time.sleep(args.serve_seconds)
        return
    print("serving; press Ctrl-C to stop", flush=True)
    # A server stops between units of work: the first Ctrl-C asks for a stop after the current
    # workload, a second one interrupts at once (Python's default).
    stop = threading.Event()

    def request_stop(_signum: int, _frame: object) -> None:
        stop.set()
        signal.signal(signal.SIGINT, signal.default_int_handler)

    signal.signal(signal.SIGINT, request_stop)
    for round_number in itertools.count(2):
        if stop.wait(args.interval):
            break
        workload.run()
        print(f"workload {round_number} done", flush=True)
    print("stopped", flush=True)


if __name__ == "__main__":
    main()
