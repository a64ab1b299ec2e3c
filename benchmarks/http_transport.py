"""Requests per second through `ResilientTransport` + `standard_pipeline()` vs plain httpx.

The server runs in a separate process (so it does not share the client's GIL) and answers
every GET with a fixed 200 and keep-alive:

- `--server raw` (default): a minimal asyncio protocol, about as fast as a local server can
  answer: the harshest setting for the pipeline's overhead;
- `--server stdlib`: the standard library's `ThreadingHTTPServer`, a typical Python server.

Sync and async clients, plain and resilient, are timed interleaved, round by round; the ratio
is the median of per-round throughput ratios.

On a loaded machine the wall-clock ratios swing from round to round (a request waits for a
CPU), so each round also records the CPU time spent per request by the client process (every
thread) and by the server process (Linux: `/proc`). With one request in flight at a time, a
quiet machine's throughput is bounded by that CPU work, so the ratio of the sums
`(client + server)` estimates the quiet ratio; it is printed beside the measured one, as an
estimate.

    .venv/bin/python benchmarks/http_transport.py --requests 2000 --rounds 7 --server raw
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import http.server
import os
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import httpx

from resilience.http import AsyncResilientTransport, ResilientTransport, standard_pipeline

RESPONSE = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n\r\nok"


class _Protocol(asyncio.Protocol):
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport: asyncio.Transport = transport  # type: ignore[assignment]
        self.buffer = b""

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while b"\r\n\r\n" in self.buffer:  # GETs only: no body to skip
            _, self.buffer = self.buffer.split(b"\r\n\r\n", 1)
            self.transport.write(RESPONSE)


class _StdlibHandler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002, ARG002 - stdlib signature, silenced
        return


def serve(port: int, kind: str) -> None:
    if kind == "stdlib":
        http.server.ThreadingHTTPServer(("127.0.0.1", port), _StdlibHandler).serve_forever()
        return

    async def main() -> None:
        server = await asyncio.get_running_loop().create_server(_Protocol, "127.0.0.1", port)
        async with server:
            await server.serve_forever()

    asyncio.run(main())


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def wait_listening(port: int) -> None:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
        except OSError:
            time.sleep(0.05)
        else:
            return
    raise RuntimeError("the benchmark server did not start")


_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
SERVER_PID: int | None = None
"""The server process, whose CPU time each round reads from `/proc` (None: not measured)."""
CPU: dict[str, list[tuple[float, float]]] = {}
"""Per candidate and round: (client CPU seconds, server CPU seconds) per request."""


def server_cpu() -> float:
    """The server process's user + system CPU seconds so far (0 where `/proc` is missing)."""
    if SERVER_PID is None:
        return 0.0
    try:
        fields = Path(f"/proc/{SERVER_PID}/stat").read_text(encoding="ascii").rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / _TICK  # utime, stime (fields 14 and 15)


def time_sync(fn: Callable[[], object], number: int, name: str | None = None) -> float:
    cpu, served = time.process_time(), server_cpu()
    start = time.perf_counter()
    for _ in range(number):
        fn()
    elapsed = time.perf_counter() - start
    if name is not None:
        CPU.setdefault(name, []).append(((time.process_time() - cpu) / number, (server_cpu() - served) / number))
    return elapsed / number


async def time_async(fn: Callable[[], Awaitable[object]], number: int, name: str | None = None) -> float:
    cpu, served = time.process_time(), server_cpu()
    start = time.perf_counter()
    for _ in range(number):
        await fn()
    elapsed = time.perf_counter() - start
    if name is not None:
        CPU.setdefault(name, []).append(((time.process_time() - cpu) / number, (server_cpu() - served) / number))
    return elapsed / number


def show_cpu(names: list[str]) -> None:
    """CPU per request (median of rounds) and the quiet-machine ratio it implies."""
    if not all(name in CPU for name in names):
        return
    plain, resilient = (CPU.pop(name) for name in names)
    client = [statistics.median(c for c, _ in rounds) for rounds in (plain, resilient)]
    server = [statistics.median(s for _, s in rounds) for rounds in (plain, resilient)]
    print(
        f"CPU per request (median of rounds): client {client[0] * 1e6:,.1f} -> {client[1] * 1e6:,.1f} us "
        f"(+{(client[1] - client[0]) * 1e6:,.1f}), server {server[0] * 1e6:,.1f} / {server[1] * 1e6:,.1f} us; "
        f"CPU-bound throughput ratio (estimate for a quiet machine): "
        f"{(client[0] + server[0]) / (client[1] + server[1]):.3f}x\n"
    )


def show(title: str, samples: dict[str, list[float]]) -> None:
    plain = samples["plain httpx"]
    resilient = samples["ResilientTransport + standard_pipeline()"]
    ratios = [p / r for p, r in zip(plain, resilient, strict=True)]  # throughput ratio per round
    added = [r - p for p, r in zip(plain, resilient, strict=True)]
    print(f"### {title}\n")
    print("| client | median per request | best round | requests/s (best) |")
    print("|---|---:|---:|---:|")
    for name, values in samples.items():
        print(
            f"| {name} | {statistics.median(values) * 1e6:,.1f} us | {min(values) * 1e6:,.1f} us | {1 / min(values):,.0f} |"
        )
    print(
        f"\nthroughput vs plain: median of per-round ratios {statistics.median(ratios):.3f}x, "
        f"best rounds {min(plain) / min(resilient):.3f}x; added per request: median "
        f"{statistics.median(added) * 1e6:+.1f} us"
    )
    print(f"per-round ratios: {', '.join(f'{r:.3f}' for r in ratios)}\n")
    show_cpu(list(samples))


class _Instant(httpx.BaseTransport):
    """A transport that answers at once from memory: what is left is the resilient layer's cost."""

    def __init__(self) -> None:
        self.response = httpx.Response(200, content=b"ok")

    def handle_request(self, request: httpx.Request) -> httpx.Response:  # noqa: ARG002 - any request
        return self.response


def bench_overhead(number: int, rounds: int) -> None:
    inner = _Instant()
    request = httpx.Request("GET", "http://127.0.0.1:8000/")
    resilient = ResilientTransport(standard_pipeline(), inner)
    candidates = {"instant transport": inner, "ResilientTransport + standard_pipeline() over it": resilient}
    samples: dict[str, list[float]] = {name: [] for name in candidates}
    gc.disable()
    try:
        for _ in range(rounds):
            for name, transport in candidates.items():
                samples[name].append(time_sync(lambda t=transport: t.handle_request(request), number))
    finally:
        gc.enable()
    added = [r - p for p, r in zip(*samples.values(), strict=True)]
    print("### the resilient layer alone (sync, an in-memory transport, no network)\n")
    print(f"added per request: median {statistics.median(added) * 1e6:.1f} us, best round {min(added) * 1e6:.1f} us\n")


def bench_sync(url: str, number: int, rounds: int) -> None:
    clients = {
        "plain httpx": httpx.Client(),
        "ResilientTransport + standard_pipeline()": httpx.Client(transport=ResilientTransport(standard_pipeline())),
    }
    samples: dict[str, list[float]] = {name: [] for name in clients}
    try:
        for client in clients.values():
            time_sync(lambda c=client: c.get(url), max(number // 10, 1))  # warm up, open the connection
        gc.disable()
        for _ in range(rounds):
            for name, client in clients.items():
                samples[name].append(time_sync(lambda c=client: c.get(url), number, name))
    finally:
        gc.enable()
        for client in clients.values():
            client.close()
    show("sync: httpx.Client", samples)


def bench_async(url: str, number: int, rounds: int) -> None:
    async def run() -> None:
        clients = {
            "plain httpx": httpx.AsyncClient(),
            "ResilientTransport + standard_pipeline()": httpx.AsyncClient(
                transport=AsyncResilientTransport(standard_pipeline())
            ),
        }
        samples: dict[str, list[float]] = {name: [] for name in clients}
        try:
            for client in clients.values():
                await time_async(lambda c=client: c.get(url), max(number // 10, 1))
            gc.disable()
            for _ in range(rounds):
                for name, client in clients.items():
                    samples[name].append(await time_async(lambda c=client: c.get(url), number, name))
        finally:
            gc.enable()
            for client in clients.values():
                await client.aclose()
        show("async: httpx.AsyncClient", samples)

    asyncio.run(run())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--requests", type=int, default=2000, help="requests per candidate per round")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--server", choices=["raw", "stdlib"], default="raw")
    parser.add_argument("--serve", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(args.serve, args.server)
        return
    port = free_port()
    server = subprocess.Popen([sys.executable, __file__, "--serve", str(port), "--server", args.server])
    global SERVER_PID
    SERVER_PID = server.pid
    try:
        wait_listening(port)
        url = f"http://127.0.0.1:{port}/"
        print(
            f"## HTTP ({args.server} server): {args.requests} requests x {args.rounds} rounds, "
            f"Python {sys.version.split()[0]}\n"
        )
        bench_overhead(args.requests * 5, args.rounds)
        bench_sync(url, args.requests, args.rounds)
        bench_async(url, args.requests, args.rounds)
    finally:
        server.terminate()
        server.wait(timeout=10)


if __name__ == "__main__":
    main()
