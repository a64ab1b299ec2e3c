"""Release notifications for the PostgreSQL stores: one `LISTEN` connection per store and loop.

A release statement calls `pg_notify(<table>, md5(key))`, delivered when it commits. A waiter
registers for the key's digest, makes sure the listener's `LISTEN` has been executed, and only
then asks whether the key is free (`is_free`, one read): a key that is free answers True at
once, and a release after the check is delivered to a `LISTEN` that already exists, so none
slips through between the two. A notification is only a hint that the key may be free: a
waiter that misses one (the connection dropped, the server is down) sleeps out its timeout and
the caller tries again. When the listening connection breaks, every waiter is woken (a hint
to try now) and the next wait connects again.

A release wakes the longest-waiting waiter of the key in each store (FIFO within a process);
there is no queue across processes: docs/postgres.md says why.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import threading
import time
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from resilience._runtime._threads import start_thread
from resilience.stores._steps import checked, run_steps, run_steps_async

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

__all__ = ["AsyncReleaseListener", "SyncReleaseListener", "digest"]

_log = logging.getLogger("resilience")

_POLL = 0.2
"""How long one read of the notifications blocks: bounds how late the listener sees a close."""
_RETRY_AFTER = 1.0
"""After the listening connection failed, waits poll for this long before it is tried again."""


_E = TypeVar("_E", threading.Event, asyncio.Event)


def digest(key: str) -> str:
    """The notification payload of `key` (what `md5(key)` gives in SQL)."""
    return hashlib.md5(key.encode("utf-8", "surrogateescape"), usedforsecurity=False).hexdigest()


def _first(waiters: dict[str, dict[Any, str | None]], payload: str) -> list[Any]:
    """The events a notification sets, taken off their key's queue.

    A payload `<digest>` (a release) wakes one plain waiter of this process, the first that
    arrived: waiters of one store take the key in turn instead of racing for it (and there is no
    herd to wake). A payload `<digest> <owner>` names a waiter queued in the database whose turn
    has come: only that waiter wakes.
    """
    name, _, owner = payload.partition(" ")
    events = waiters.get(name)
    if not events:
        return []
    woken = [event for event, waiting in events.items() if waiting == (owner or None)]
    if not owner:
        del woken[1:]
    for event in woken:
        _forget(waiters, name, event)
    return woken


def _forget(waiters: dict[str, dict[Any, str | None]], name: str, event: object) -> None:
    """Take a waiter's `event` off its key's queue (gone with its last waiter)."""
    events = waiters.get(name)
    if events is not None:
        events.pop(event, None)
        if not events:
            del waiters[name]


class _Listener(Generic[_E]):
    """What the sync and the async listener keep alike: their waiters and their connection's state."""

    def __init__(self, connect: Callable[[], Any], channel: str, ready: _E) -> None:
        self._connect = connect
        self._channel = channel
        self._waiters: dict[str, dict[_E, str | None]] = {}  # per key, in arrival order: owner
        self._ready: _E = ready
        ready.set()  # set while no connection is being made: nothing to wait for
        self._listening = False
        self._failed_at = -_RETRY_AFTER

    def _stopped(self, ready: _E) -> None:
        """The connection ended: `ready` is set, and so is every waiter's event if it was listening (try again now)."""
        was_listening, self._listening = self._listening, False
        ready.set()
        if was_listening:  # it may have lost a release
            for events in self._waiters.values():
                for event in events:
                    event.set()


class SyncReleaseListener(_Listener[threading.Event]):
    """Wakes sync waiters: a daemon thread reads one `LISTEN` connection."""

    def __init__(self, connect: Callable[[], Any], channel: str) -> None:
        super().__init__(connect, channel, threading.Event())
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._closed = False

    def wait(self, key: str, timeout: float, is_free: Callable[[], bool], *, owner: str | None = None) -> bool:
        """True when `key` is free now or released within `timeout`; False after `timeout`.

        `owner`: the waiter waits in the database's queue; it wakes when a notification names it.
        """
        name = digest(key)
        event = threading.Event()
        deadline = time.monotonic() + max(0.0, timeout)
        with self._lock:
            self._waiters.setdefault(name, {})[event] = owner
            # The listener thread, started when none runs (not again within _RETRY_AFTER of a
            # failure, so a broken LISTEN cannot turn waits into a connect loop).
            if self._thread is None and not self._closed and time.monotonic() >= self._failed_at + _RETRY_AFTER:
                self._ready = threading.Event()
                self._thread = start_thread(self._run, self._ready, name=f"resilience-pg-{self._channel}")
            ready = self._ready
        try:
            ready.wait(max(0.0, deadline - time.monotonic()))
            if run_steps(checked(is_free)):
                return True
            # No hint can come when it is not listening: the wait is a plain poll interval (False).
            return (event if self._listening else threading.Event()).wait(max(0.0, deadline - time.monotonic()))
        finally:
            with self._lock:
                _forget(self._waiters, name, event)

    def _run(self, ready: threading.Event) -> None:
        conn: Any = None
        try:
            conn = self._connect()
            conn.execute(f'LISTEN "{self._channel}"')
            self._listening = True
            ready.set()
            while not self._closed:
                for notify in conn.notifies(timeout=_POLL):
                    with self._lock:
                        events = _first(self._waiters, notify.payload)
                    for event in events:
                        event.set()
        except Exception:  # noqa: BLE001 -- a broken listener only costs waiters their hint
            _log.debug("release listener on %s stopped", self._channel, exc_info=True)
            self._failed_at = time.monotonic()
        finally:
            with self._lock:
                self._thread = None
                self._stopped(ready)
            if conn is not None:
                with contextlib.suppress(Exception):
                    conn.close()

    def close(self) -> None:
        """Stop the thread (within one poll) and close its connection."""
        with self._lock:
            self._closed = True
            thread = self._thread
        if thread is not None:
            thread.join(timeout=5 * _POLL)


class AsyncReleaseListener(_Listener[asyncio.Event]):
    """Wakes async waiters of one event loop: a task reads one `LISTEN` connection."""

    def __init__(self, connect: Callable[[], Awaitable[Any]], channel: str) -> None:
        super().__init__(connect, channel, asyncio.Event())
        self._task: asyncio.Task[None] | None = None

    async def wait(
        self, key: str, timeout: float, is_free: Callable[[], Awaitable[bool]], *, owner: str | None = None
    ) -> bool:
        """See `SyncReleaseListener.wait`."""
        name = digest(key)
        event = asyncio.Event()
        self._waiters.setdefault(name, {})[event] = owner
        if self._task is None and time.monotonic() >= self._failed_at + _RETRY_AFTER:  # as the sync listener's
            self._ready = asyncio.Event()
            self._task = asyncio.get_running_loop().create_task(self._run(self._ready))
        scope = asyncio.timeout(max(0.0, timeout))
        try:
            async with scope:
                await self._ready.wait()
                if await run_steps_async(checked(is_free)):
                    return True
                # No hint can come when it is not listening: the wait is a plain poll interval.
                await (event if self._listening else asyncio.Event()).wait()
                return True
        except TimeoutError:
            if scope.expired():
                return False
            raise
        finally:
            _forget(self._waiters, name, event)

    async def _run(self, ready: asyncio.Event) -> None:
        conn: Any = None
        try:
            conn = await self._connect()
            await conn.execute(f'LISTEN "{self._channel}"')
            self._listening = True
            ready.set()
            async for notify in conn.notifies():
                for event in _first(self._waiters, notify.payload):
                    event.set()
        except Exception:  # noqa: BLE001 -- a broken listener only costs waiters their hint
            _log.debug("release listener on %s stopped", self._channel, exc_info=True)
            self._failed_at = time.monotonic()
        finally:
            self._task = None
            self._stopped(ready)
            if conn is not None:
                with contextlib.suppress(Exception):
                    await asyncio.shield(conn.close())

    async def aclose(self) -> None:
        """Stop the task and close its connection."""
        task = self._task
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
