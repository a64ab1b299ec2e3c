"""A fault-injecting TCP proxy for the reliability tests (asyncio, 127.0.0.1, in its own thread).

Modes (switch at any time with `proxy.mode = ...`, `proxy.latency = seconds`):

- `pass`: bytes flow both ways (after `latency` seconds per chunk, each direction);
- `drop`: every open connection is closed and new ones are closed at once;
- `blackhole`: connections stay open but nothing is forwarded either way (a dead network).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from typing import Literal, Self

__all__ = ["FaultProxy"]

Mode = Literal["pass", "drop", "blackhole"]


class FaultProxy:
    """Listens on a free 127.0.0.1 port and forwards to `target_port` on 127.0.0.1."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.port = 0
        self._mode: Mode = "pass"
        self.latency = 0.0
        self.accepted = 0
        self._loop = asyncio.new_event_loop()
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._changed: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._loop.run_forever, name="fault-proxy", daemon=True)

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def start(self) -> None:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(timeout=5)

    async def _start(self) -> None:
        self._changed = asyncio.Event()
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    @property
    def mode(self) -> Mode:
        return self._mode

    @mode.setter
    def mode(self, mode: Mode) -> None:
        asyncio.run_coroutine_threadsafe(self._set_mode(mode), self._loop).result(timeout=5)

    async def _set_mode(self, mode: Mode) -> None:
        self._mode = mode
        if mode == "drop":
            for writer in list(self._writers):
                writer.transport.abort()
        assert self._changed is not None
        self._changed.set()
        self._changed = asyncio.Event()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        if self._mode == "drop":
            writer.transport.abort()
            return
        self._writers.add(writer)
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:
            self._writers.discard(writer)
            writer.transport.abort()
            return
        self._writers.add(up_writer)
        if self._mode == "drop":  # dropped while this connection was being made
            up_writer.transport.abort()
        try:
            await asyncio.gather(self._pipe(reader, up_writer), self._pipe(up_reader, writer))
        finally:
            for end in (writer, up_writer):
                self._writers.discard(end)
                end.transport.abort()

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(OSError, asyncio.IncompleteReadError):
            while True:
                chunk = await reader.read(65536)
                if not chunk:
                    break
                if self.latency > 0:
                    await asyncio.sleep(self.latency)
                while self._mode == "blackhole":  # hold the bytes until the network "comes back"
                    assert self._changed is not None
                    await self._changed.wait()
                if self._mode == "drop" or writer.transport.is_closing():
                    break
                writer.write(chunk)
                await writer.drain()
        writer.transport.abort()

    def close(self) -> None:
        if not self._thread.is_alive():
            return

        async def stop() -> None:
            if self._server is not None:
                self._server.close()
            # Abort every connection and let the handlers end on their own (a cancelled handler
            # task makes asyncio's stream callback log an error). A connection accepted while the
            # server closes starts a handler task after the first look, so look until none is
            # left: a transport left open when the loop closes is garbage-collected later, and on
            # 3.12/3.13 its `__del__` reaches the closed server (`Server._detach`) and raises
            # during whichever test runs then.
            for _ in range(50):
                await self._set_mode("drop")
                tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
                if not tasks:
                    break
                _, pending = await asyncio.wait(tasks, timeout=2)
                for task in pending:
                    task.cancel()
                await asyncio.gather(*pending, return_exceptions=True)
            # `abort()` closes a transport in a callback on the next loop iteration: let those run.
            for _ in range(3):
                await asyncio.sleep(0)

        asyncio.run_coroutine_threadsafe(stop(), self._loop).result(timeout=5)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)
        self._loop.close()
