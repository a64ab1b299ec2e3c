"""A real local HTTP/1.1 server for the HTTP tests: scripted answers, counted connections.

`ScriptedServer` runs a stdlib `ThreadingHTTPServer` on a free port of 127.0.0.1 in a thread.
Each request takes the next `Reply` of the script queued for its path (or the path's default
reply once the queue is empty); every request is logged, and the server counts the
connections open at any moment (to prove that no response keeps one).
"""

from __future__ import annotations

import collections
import http.server
import socket
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterator


@dataclass(frozen=True)
class Reply:
    """One scripted answer: status, headers, body; `delay` seconds before it; `drop` hangs up."""

    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b"ok"
    delay: float = 0.0
    drop: bool = False


@dataclass(frozen=True)
class Seen:
    """A request as the server saw it."""

    method: str
    path: str
    headers: dict[str, str]
    body: bytes


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, so connection reuse is observable
    disable_nagle_algorithm = True  # headers and body go out in two writes: no 40 ms delayed-ACK stall
    server: _Server

    def setup(self) -> None:
        super().setup()
        self.server.opened()

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            self.server.closed()

    def _serve(self) -> None:
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            body = self._read_chunked()
            if body is None:  # the client stopped mid-body
                self.server.owner.log(Seen(self.command, self.path.split("?", 1)[0], dict(self.headers.items()), b""))
                self.close_connection = True
                return
        else:
            length = int(self.headers.get("Content-Length", "0") or 0)
            body = self.rfile.read(length) if length else b""
        path = self.path.split("?", 1)[0]
        self.server.owner.log(Seen(self.command, path, dict(self.headers.items()), body))
        reply = self.server.owner.next_reply(path)
        if reply.delay and self.server.owner.stopping.wait(reply.delay):
            self.close_connection = True
            return
        if reply.drop:
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
            return
        self.send_response(reply.status)
        for name, value in reply.headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(reply.body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(reply.body)

    def _read_chunked(self) -> bytes | None:
        """A chunked request body; None when the connection ends before its last chunk."""
        body = b""
        while True:
            line = self.rfile.readline()
            if not line.strip():
                return None
            size = int(line.split(b";", 1)[0], 16)
            if size == 0:
                self.rfile.readline()  # the blank line after the last chunk (no trailers sent here)
                return body
            chunk = self.rfile.read(size + 2)
            if len(chunk) < size + 2:
                return None
            body += chunk[:size]

    do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = do_HEAD = do_OPTIONS = _serve  # noqa: N815 - stdlib names

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - stdlib signature
        return


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    owner: ScriptedServer

    def opened(self) -> None:
        with self.owner.lock:
            self.owner.open_connections += 1
            self.owner.connections_made += 1

    def closed(self) -> None:
        with self.owner.lock:
            self.owner.open_connections -= 1


class ScriptedServer:
    """The server; `script(path, *replies)` queues answers, `seen` lists requests."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.open_connections = 0
        self.connections_made = 0
        self.seen: list[Seen] = []
        self._queues: dict[str, collections.deque[Reply]] = {}
        self._defaults: dict[str, Reply] = {}
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.owner = self
        self.port: int = self._server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()

    def script(self, path: str, *replies: Reply, default: Reply | None = None) -> str:
        """Queue `replies` for `path` (then `default`, else 200 "ok"); returns the full URL."""
        with self.lock:
            self._queues.setdefault(path, collections.deque()).extend(replies)
            if default is not None:
                self._defaults[path] = default
        return self.url + path

    def next_reply(self, path: str) -> Reply:
        with self.lock:
            queue = self._queues.get(path)
            if queue:
                return queue.popleft()
            return self._defaults.get(path, Reply())

    def log(self, seen: Seen) -> None:
        with self.lock:
            self.seen.append(seen)

    def requests_to(self, path: str) -> list[Seen]:
        """The requests seen for `path`, in order."""
        with self.lock:
            return [item for item in self.seen if item.path == path]

    def stop(self) -> None:
        self.stopping.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)


def free_port() -> int:
    """A port nothing listens on (bound, then released)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


def serve() -> Iterator[ScriptedServer]:
    """A fixture body: one server per test."""
    server = ScriptedServer()
    try:
        yield server
    finally:
        server.stop()
