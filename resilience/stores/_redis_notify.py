"""Release notifications for the Redis stores: one shared subscription per store.

A release script publishes on a channel named like the released key (`PUBLISH`, or
`SPUBLISH` on Cluster, where a channel named like the key lives in the key's hash slot, so the
script may publish there). A waiter registers for the channel and sleeps on an event; one
listener per store (a daemon thread for sync waiters, a task per event loop for async ones)
reads the subscription connection and sets the events of the channel that was released.

A wait subscribes first, waits for the server's confirmation, and only then asks whether the
key is free (`is_free`, one read-only script call): a key that is free answers True at once,
and a release after the check is published to a subscription that already exists, so none
slips through between the two. A notification is still only a hint: a waiter that misses one
(the connection dropped, the subscription failed, the client has no pub/sub) sleeps out its
timeout and the caller polls again. A channel stays subscribed for `_LINGER` seconds after its last waiter leaves, so
a caller that polls in a loop keeps one subscription instead of re-subscribing each round.
The listener stops, and closes its connection, once nothing is subscribed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
import weakref
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from resilience._runtime._threads import on_fork_in_child, start_thread
from resilience.stores._steps import checked, run_steps, run_steps_async

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from resilience.stores._steps import Steps

__all__ = ["AsyncReleaseListener", "SyncReleaseListener"]

_log = logging.getLogger("resilience")

_POLL = 0.05
"""How long one read of the subscription blocks: bounds how late the listener sees a close."""
_LINGER = 2.0


_TURNS_KEPT = 64
"""Turns kept per channel for waiters not registered yet: most are other processes' waiters."""

_E = TypeVar("_E", threading.Event, asyncio.Event)


def _next_message(pubsub: Any, *, sharded: bool) -> Any:
    """The next message, waiting at most `_POLL` seconds (None when none came)."""
    return pubsub.get_sharded_message(timeout=_POLL) if sharded else pubsub.get_message(timeout=_POLL)


def _parse(message: Any) -> tuple[str, str, str | None] | None:
    """`(kind, channel, turn)` of a pub/sub message: kind "released" or "subscribed"; else None.

    `turn` is the owner whose turn a release announces (payload `h:<owner>`, the lock's fair
    queue), or None when the release is for everyone.
    """
    if not isinstance(message, dict):
        return None
    kind, channel = _decoded(message.get("type")), _decoded(message.get("channel"))
    if not isinstance(channel, str):
        return None
    if kind in {"message", "smessage"}:
        data = _decoded(message.get("data"))
        turn = data[2:] if isinstance(data, str) and data.startswith("h:") else None
        return "released", channel, turn
    if kind in {"subscribe", "ssubscribe"}:
        return "subscribed", channel, None
    return None


def _decoded(value: object) -> object:
    """A message field as text when a client without decode_responses gives bytes (any byte kept)."""
    return value.decode("utf-8", "surrogateescape") if isinstance(value, bytes) else value


async def _is_free_async(check: Callable[[], Awaitable[bool]]) -> bool:
    task = asyncio.current_task()
    baseline = 0 if task is None else task.cancelling()
    free = await run_steps_async(checked(check))
    if task is not None and task.cancelling() > baseline:
        # The waiter's own timeout (or a cancel) hit the check, and the client swallowed the
        # CancelledError (redis-py's Cluster client retries the command, or turns it into an
        # error of its own): going on would leave the waiter asleep past a timeout that has
        # already fired, for ever.
        raise asyncio.CancelledError
    return free


def _idle_read_pause(started: float) -> float:
    """How long to pause after a read that returned no message, begun at `started`.

    A read normally blocks up to `_POLL`; redis-py's Cluster pub/sub returns None at once when it
    holds no per-node subscription (between a `SSUBSCRIBE` and its node mapping, or after the
    last `SUNSUBSCRIBE`), and a loop around such a read would spin.
    """
    return max(0.0, _POLL - (time.monotonic() - started))


_LISTENERS: weakref.WeakSet[SyncReleaseListener] = weakref.WeakSet()


def _forget_after_fork() -> None:
    """In a forked child the listener thread is gone and the connection is the parent's."""
    for listener in list(_LISTENERS):
        listener._forget()


on_fork_in_child(_forget_after_fork)


class _Subscriptions(Generic[_E]):
    """What both listeners keep: each channel's waiters and subscription, and how a message wakes them.

    A waiter is a wake-up callback, kept with the queued owner it waits for (None: any release).
    """

    def __init__(self, open_pubsub: Callable[[], Any], *, sharded: bool) -> None:
        self._open = open_pubsub
        self._sharded = sharded
        self._forget()

    def _forget(self) -> None:
        """No waiter, no subscription, no connection."""
        self._waiters: dict[str, dict[Callable[[], object], str | None]] = {}
        self._subscribed: dict[str, _E] = {}  # channel -> set once the server confirms
        self._idle: dict[str, float] = {}  # channel -> when its last waiter left
        self._pubsub: Any = None

    def _drop(self, channel: str, wake: Callable[[], object]) -> None:
        """Forget a waiter of `channel`; a channel left without waiters turns idle (unsubscribed after `_LINGER`)."""
        entries = self._waiters.get(channel)
        if entries is not None:
            entries.pop(wake, None)
            if not entries:
                del self._waiters[channel]
                self._idle[channel] = time.monotonic()

    def _forget_channel(self, channel: str) -> None:
        """Drop what else is kept of a channel that lingered out."""

    def _subscribe_command(self, channel: str) -> Any:
        """Send the subscribe of `channel` on the connection, opened on first use (an awaitable for asyncio).

        Sharded (`SSUBSCRIBE`) on Cluster, where a channel lives in its name's hash slot.
        """
        if self._pubsub is None:
            self._pubsub = self._open()
        return self._pubsub.ssubscribe(channel) if self._sharded else self._pubsub.subscribe(channel)

    def _unsubscribe_idle(self, now: float) -> Steps[None]:
        """Forget the channels idle for `_LINGER`, unsubscribing those still subscribed.

        Steps: run on the sync or the asyncio pub/sub.
        """
        done = [channel for channel, since in self._idle.items() if now - since >= _LINGER]
        for channel in done:  # all forgotten before the first step: a waiter may come back meanwhile
            del self._idle[channel]
            self._forget_channel(channel)
        for channel in [channel for channel in done if self._subscribed.pop(channel, None) is not None]:
            try:
                yield self._pubsub.sunsubscribe(channel) if self._sharded else self._pubsub.unsubscribe(channel)
            except Exception:  # noqa: BLE001 -- the connection goes when the listener stops anyway
                _log.debug("unsubscribe failed for %r", channel, exc_info=True)

    def _dispatch(self, kind: str, channel: str, turn: str | None) -> None:
        """Act on a parsed message: confirm a subscription, or wake the waiters a release wakes."""
        if kind == "subscribed":
            confirmed = self._subscribed.get(channel)
            if confirmed is not None:
                confirmed.set()
            return
        for wake, owner in list(self._waiters.get(channel, {}).items()):
            if owner is not None and turn is not None and owner != turn:  # a turn announced for another waiter
                continue
            try:
                wake()
            except Exception:  # noqa: BLE001 -- one listener never stops the others
                _log.debug("a release listener raised", exc_info=True)

    def _wake_everyone(self) -> None:
        """Closing: every subscription counts as confirmed and every waiter is woken (each tries again now)."""
        for confirmed in self._subscribed.values():
            confirmed.set()
        for waiters in self._waiters.values():
            for wake in waiters:
                wake()
        self._waiters.clear()


class SyncReleaseListener(_Subscriptions[threading.Event]):
    """Wakes sync waiters on release: one pub/sub connection and at most one thread."""

    def __init__(self, open_pubsub: Callable[[], Any], *, sharded: bool, name: str) -> None:
        super().__init__(open_pubsub, sharded=sharded)
        self._name = name
        _LISTENERS.add(self)

    def _forget(self) -> None:
        """Start from nothing (used at creation and in a forked child: never close the parent's connection)."""
        super()._forget()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()

    def wait(self, channel: str, timeout: float, is_free: Callable[[], bool], owner: str | None = None) -> bool:
        """Block until `channel` is released (True) or `timeout` passes (False); True at once if free.

        With `owner`, only a release that announces `owner`'s turn wakes it.
        """
        deadline = time.monotonic() + max(0.0, timeout)
        event = threading.Event()
        confirmed = self._register(channel, event.set, owner)
        try:
            if confirmed is not None:
                confirmed.wait(max(0.0, deadline - time.monotonic()))
            return run_steps(checked(is_free)) or event.wait(max(0.0, deadline - time.monotonic()))
        finally:
            self._remove(channel, event.set)

    def listen(self, channel: str, callback: Callable[[], object], owner: str | None = None) -> Callable[[], None]:
        """Call `callback()` (on the listener thread) when `channel` is released; returns the remover.

        No check, no wait: the caller sleeps its own time and is woken early by a release (one
        `SUBSCRIBE` per channel, kept a while after its last listener). Nothing happens if the
        subscription fails: the caller's own timeout is the fallback. With `owner`, only a
        release that announces `owner`'s turn calls back.
        """
        self._register(channel, callback, owner)
        return lambda: self._remove(channel, callback)

    def _remove(self, channel: str, callback: Callable[[], object]) -> None:
        with self._lock:
            self._drop(channel, callback)

    def close(self) -> None:
        """Stop the listener thread and close the subscription connection."""
        with self._lock:
            self._stop.set()
            thread, self._thread = self._thread, None
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=5 * _POLL + 1.0)
        with self._lock:
            self._wake_everyone()
            self._close_pubsub()
            self._stop = threading.Event()

    def _register(self, channel: str, callback: Callable[[], object], owner: str | None) -> threading.Event | None:
        """Register `callback` for `channel`'s releases (for `owner`'s turn only, unless None).

        The channel's confirmation event, subscribing and starting the thread if needed; None if
        subscribing failed (nothing will call back).
        """
        with self._lock:
            self._waiters.setdefault(channel, {})[callback] = owner
            self._idle.pop(channel, None)
            confirmed = self._subscribed.get(channel)
            if confirmed is None:
                try:
                    self._subscribe_command(channel)
                except Exception:  # noqa: BLE001 -- a hint only: the waiter sleeps out its timeout and polls
                    _log.debug("release notification unavailable for %r", channel, exc_info=True)
                    return None
                confirmed = self._subscribed[channel] = threading.Event()
            if self._thread is None:
                self._thread = start_thread(self._run, self._stop, name=self._name)
        return confirmed

    # -- under self._lock ---------------------------------------------------------------------

    def _close_pubsub(self) -> None:
        pubsub, self._pubsub = self._pubsub, None
        self._subscribed.clear()
        self._idle.clear()
        if pubsub is not None:
            with contextlib.suppress(Exception):
                pubsub.close()

    # -- the listener thread -------------------------------------------------------------------

    def _run(self, stop: threading.Event) -> None:
        while not stop.is_set():
            with self._lock:
                if stop.is_set():
                    return
                run_steps(self._unsubscribe_idle(time.monotonic()))
                if not self._subscribed:
                    self._close_pubsub()
                    self._thread = None
                    return
                pubsub = self._pubsub
            started = time.monotonic()
            try:
                message = _next_message(pubsub, sharded=self._sharded)
            except Exception:  # noqa: BLE001 -- redis-py reconnects and resubscribes on the next read
                _log.debug("release listener read failed", exc_info=True)
                stop.wait(_POLL)
                continue
            if message is None:
                stop.wait(_idle_read_pause(started))
            parsed = _parse(message)
            if parsed is not None:
                with self._lock:
                    self._dispatch(*parsed)


class AsyncReleaseListener(_Subscriptions[asyncio.Event]):
    """Wakes the async waiters of one event loop: one pub/sub connection and one task."""

    def __init__(self, open_pubsub: Callable[[], Any], *, sharded: bool) -> None:
        super().__init__(open_pubsub, sharded=sharded)
        self._confirmed_at: dict[str, float] = {}  # channel -> when the server last confirmed it
        # channel -> owner -> when its turn was announced with no waiter of it registered (yet)
        self._turns: dict[str, dict[str, float]] = {}
        self._task: asyncio.Task[None] | None = None
        self._subscribing: set[asyncio.Task[None]] = set()
        self._closed = False

    async def wait(
        self,
        channel: str,
        timeout: float,
        is_free: Callable[[], Awaitable[bool]],
        owner: str | None = None,
        *,
        since: float | None = None,
    ) -> bool:
        """Wait until `channel` is released (True) or `timeout` passes (False); True at once if free.

        With `owner`, only a release that announces `owner`'s turn wakes it. `since` (monotonic)
        is when `owner`'s last refused attempt was sent: when the channel's subscription was
        confirmed before it, any later turn of `owner` reached this listener (and was kept for
        it if it came before this wait), so the wait skips the `is_free` check.
        """
        event = asyncio.Event()
        # Registered before the subscription's await, so that `aclose` meanwhile still wakes it.
        self._waiters.setdefault(channel, {})[event.set] = owner
        self._idle.pop(channel, None)
        try:
            if owner is not None and self._turns.get(channel, {}).pop(owner, None) is not None:
                return True  # its turn came while its attempt was on its way back
            async with asyncio.timeout(max(0.0, timeout)):
                confirmed = self._subscribe(channel)
                if confirmed is not None:
                    await confirmed.wait()
                heard = since is not None and owner is not None and self._confirmed_at.get(channel, since + 1) <= since
                if not heard and await _is_free_async(is_free):
                    return True
                await event.wait()
                return True
        except TimeoutError:
            return False
        finally:
            self._drop(channel, event.set)

    async def aclose(self) -> None:
        """Stop the listener task and close the subscription connection."""
        self._closed = True
        task, self._task = self._task, None
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self._subscribing:
            # Bounded: a subscription that ignores its cancellation must not hang the close.
            for subscribing in self._subscribing:
                subscribing.cancel()
            await asyncio.wait(self._subscribing, timeout=1.0)
        self._wake_everyone()
        await self._close_pubsub()

    def _subscribe(self, channel: str) -> asyncio.Event | None:
        """The channel's confirmation event (subscribing in the background if needed), or None if closed.

        The `SUBSCRIBE` runs in a task of its own, never in the waiter's: a waiter's timeout must
        not cancel redis-py halfway through a command on the shared connection (seen on Cluster,
        where such a cancelled `SSUBSCRIBE` never returned and took its waiter with it). The
        event is set by the server's confirmation, or at once when the subscription fails.
        """
        if self._closed:
            return None
        confirmed = self._subscribed.get(channel)
        if confirmed is None:
            # Recorded at once: a concurrent waiter must not subscribe twice.
            confirmed = self._subscribed[channel] = asyncio.Event()
            task = asyncio.get_running_loop().create_task(self._send_subscribe(channel, confirmed))
            self._subscribing.add(task)
            task.add_done_callback(self._subscribing.discard)
        return confirmed

    async def _send_subscribe(self, channel: str, confirmed: asyncio.Event) -> None:
        try:
            await self._subscribe_command(channel)
        except Exception:  # noqa: BLE001 -- a hint only: the waiter sleeps out its timeout and polls
            _log.debug("release notification unavailable for %r", channel, exc_info=True)
            if self._subscribed.get(channel) is confirmed:
                del self._subscribed[channel]
            confirmed.set()  # the waiters on this attempt go on to their check
        else:
            if not self._closed and (self._task is None or self._task.done()):
                self._task = asyncio.get_running_loop().create_task(self._run(), name="resilience-redis-release")

    async def _close_pubsub(self) -> None:
        pubsub, self._pubsub = self._pubsub, None
        self._subscribed.clear()
        self._confirmed_at.clear()
        self._turns.clear()
        self._idle.clear()
        if pubsub is not None:
            with contextlib.suppress(Exception):
                closer = getattr(pubsub, "aclose", None) or pubsub.reset
                await closer()

    def _forget_channel(self, channel: str) -> None:
        self._confirmed_at.pop(channel, None)
        self._turns.pop(channel, None)

    async def _run(self) -> None:
        while True:
            await run_steps_async(self._unsubscribe_idle(time.monotonic()))
            if not self._subscribed:
                self._task = None
                await self._close_pubsub()
                return
            parsed = _parse(await self._read())
            if parsed is None:
                continue
            kind, channel, turn = parsed
            if kind == "subscribed":
                self._confirmed_at[channel] = time.monotonic()
            elif turn is not None and turn not in self._waiters.get(channel, {}).values():
                # Kept for a waiter not registered yet (the newest `_TURNS_KEPT` per channel).
                turns = self._turns.setdefault(channel, {})
                turns[turn] = time.monotonic()
                if len(turns) > _TURNS_KEPT:
                    del turns[next(iter(turns))]
            self._dispatch(kind, channel, turn)

    async def _read(self) -> Any:
        """The next message, or None after at most about `_POLL` seconds (never at once)."""
        started = time.monotonic()
        try:
            message = await _next_message(self._pubsub, sharded=self._sharded)
        except Exception:  # noqa: BLE001 -- redis-py reconnects and resubscribes on the next read
            current = asyncio.current_task()
            if current is not None and current.cancelling():
                # A cancellation that a client's own read timeout turned into an error
                # (3.11's asyncio.timeout can): stop as asked, never loop on past `aclose`.
                raise asyncio.CancelledError from None
            _log.debug("release listener read failed", exc_info=True)
            message = None
        if message is None:
            # Also the one suspension point when a read returns at once: without it the loop
            # would never yield, and the whole event loop (timeouts, cancellation) would hang.
            await asyncio.sleep(_idle_read_pause(started))
        return message
