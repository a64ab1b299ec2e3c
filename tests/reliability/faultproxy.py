"""A fault-injecting TCP proxy for the reliability tests (plain sockets and threads, 127.0.0.1).

Modes (switch at any time with `proxy.mode = ...`, `proxy.latency = seconds`):

- `pass`: bytes flow both ways (after `latency` seconds per chunk, each direction);
- `drop`: every open connection is closed and new ones are closed at once;
- `blackhole`: connections stay open but nothing is forwarded either way (a dead network).

Threads, not asyncio: an asyncio server's transports outlive `close()` when a connection races
it, and on 3.13 their `__del__` raised in a later test. Here every socket is closed by `close()`,
and every thread joined: nothing of a proxy survives its test. One accept thread, two pump
threads per connection (the tests open a handful).
"""

from __future__ import annotations

import contextlib
import select
import socket
import threading
import time
from typing import TYPE_CHECKING, Literal, Self

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["FaultProxy"]

Mode = Literal["pass", "drop", "blackhole"]

_POLL = 0.05
"""How often the accept loop looks whether the proxy was closed."""


class FaultProxy:
    """Listens on a free 127.0.0.1 port and forwards to `target_port` on 127.0.0.1."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.latency = 0.0
        self.accepted = 0
        self._mode: Mode = "pass"
        self._closed = False
        self._changed = threading.Condition()
        self._sockets: set[socket.socket] = set()
        self._threads: list[threading.Thread] = []
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def start(self) -> None:
        self._spawn(self._accept, "fault-proxy-accept")

    @property
    def mode(self) -> Mode:
        return self._mode

    @mode.setter
    def mode(self, mode: Mode) -> None:
        with self._changed:
            self._mode = mode
            if mode == "drop":
                for sock in list(self._sockets):
                    self._abort(sock)
            self._changed.notify_all()

    def close(self) -> None:
        with self._changed:
            self._closed = True
        self.mode = "drop"
        for thread in list(self._threads):
            thread.join(timeout=5)
        self._listener.close()

    # -- internals ---------------------------------------------------------------------------------

    def _spawn(self, target: Callable[..., None], name: str, *args: object) -> None:
        thread = threading.Thread(target=target, args=args, name=name, daemon=True)
        self._threads.append(thread)
        thread.start()

    def _abort(self, sock: socket.socket) -> None:
        """Close at once (under `_changed`); `shutdown` also wakes a thread blocked in `recv`."""
        self._sockets.discard(sock)
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)
        sock.close()

    def _accept(self) -> None:
        while not self._closed:
            if not select.select([self._listener], [], [], _POLL)[0]:
                continue
            try:
                client, _ = self._listener.accept()
            except OSError:
                continue
            self.accepted += 1
            try:
                upstream = None if self._mode == "drop" else socket.create_connection(("127.0.0.1", self.target_port))
            except OSError:
                upstream = None
            with self._changed:
                if upstream is None or self._mode == "drop" or self._closed:
                    self._abort(client)
                    if upstream is not None:
                        self._abort(upstream)
                    continue
                self._sockets.update((client, upstream))
            self._spawn(self._pump, "fault-proxy-up", client, upstream)
            self._spawn(self._pump, "fault-proxy-down", upstream, client)

    def _pump(self, source: socket.socket, target: socket.socket) -> None:
        """Forward one direction until either end closes; then close both (as a dead peer would)."""
        try:
            while True:
                chunk = source.recv(65536)
                if not chunk:
                    break
                if self.latency > 0:
                    time.sleep(self.latency)
                with self._changed:
                    while self._mode == "blackhole" and not self._closed:  # hold the bytes
                        self._changed.wait()
                    if self._mode == "drop" or self._closed:
                        break
                target.sendall(chunk)
        except OSError:
            pass
        finally:
            with self._changed:
                self._abort(source)
                self._abort(target)
