"""`Signal`: a thread-safe abort signal, in the spirit of the web's `AbortSignal`.

A signal aborts once, with a reason (an exception). Children abort with their parent,
synchronously, on the aborting thread. Code observes it by polling (`aborted`,
`raise_if_aborted`), by callback, by waiting (`wait`, `wait_async`) or by letting it cancel
the current asyncio task (`cancel_scope`).

Two kinds of callback: the library's own wake-ups (`wait`'s event, a cancel scope, a retry
sleep, a lock or limiter wait, an abortable HTTP send: each sets an event or schedules a task's
wake-up, and never blocks) and everything else (user code). A deferred abort
(`abort_deferred`, from the shared timer thread) runs the wake-ups where it aborts and leaves
only user code to the caller's worker, so no user callback, however slow or many, can keep
the library's waiters asleep.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import logging
import threading
from typing import TYPE_CHECKING

from resilience._runtime._threads import interrupts_caller, on_fork_in_child, resolve_threadsafe
from resilience._validation import Duration, to_seconds
from resilience.exceptions import OperationAbortedError, ValidationError

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable
    from types import TracebackType

__all__ = ["Signal"]

_logger = logging.getLogger("resilience")

# One lock for every signal: the critical sections are a few dictionary operations, and a
# lock per signal would cost an allocation on every execution's hot path.
_LOCK = threading.Lock()
_ids = itertools.count()


@on_fork_in_child
def _new_lock_after_fork() -> None:
    # A thread of the parent may have held the lock at fork time; the child has no such
    # thread, so it starts with a fresh lock (and can abort its inherited leases' signals).
    global _LOCK  # noqa: PLW0603 - the module's one lock, replaced only in a forked child
    _LOCK = threading.Lock()


def _call_each(callbacks: Iterable[Callable[[BaseException], object]], reason: BaseException, what: str) -> None:
    """Call every callback with `reason`, logging what one raises (the others still run).

    A Ctrl-C or exit on the main thread (`interrupts_caller`) is raised once all have run.
    """
    interrupt: BaseException | None = None
    for callback in callbacks:
        try:
            callback(reason)
        except BaseException as error:
            if interrupt is None and interrupts_caller(error):
                interrupt = error
            else:
                _logger.exception("%s", what)
    if interrupt is not None:
        raise interrupt


class Signal:
    """An abort signal: `abort(reason)` once, observed by children, callbacks and waiters."""

    __slots__ = ("__weakref__", "_callbacks", "_parent", "_reason")

    def __init__(self) -> None:
        self._reason: BaseException | None = None
        # Keyed by an int from add_callback, or by what registered itself: a child signal (see
        # child()), a cancel scope, a library wake-up.
        self._callbacks: dict[object, Callable[[BaseException], object]] | None = None
        self._parent: Signal | None = None

    @property
    def aborted(self) -> bool:
        """True once the signal (or an ancestor) has aborted."""
        return self._reason is not None

    @property
    def reason(self) -> BaseException | None:
        """The exception the signal aborted with, or None."""
        return self._reason

    def abort(self, reason: BaseException | None = None) -> bool:
        """Abort with `reason` (default: a fresh `OperationAbortedError`).

        Wakes the waiters (the `add_wakeup` wake-ups of this signal and its descendants), then
        runs the `add_callback` callbacks, synchronously on this thread. Returns False, and
        changes nothing, if the signal had already aborted.
        """
        if reason is None:
            reason = OperationAbortedError()
        pending = self._abort(reason, "abort")
        if pending is None:
            return False
        _call_each(pending, reason, "a signal callback raised")
        return True

    def abort_deferred(self, reason: BaseException) -> Callable[[], None] | None:
        """Abort now, but leave the user callbacks to the caller: a function that runs them, or None.

        For a thread that must not run user code (a timer): this signal and its descendants
        read as aborted as soon as this returns, and the wake-ups on them (cancel scopes, `wait`
        and `wait_async`, `add_wakeup`) have run; only the callbacks of `add_callback` wait for
        the returned function, to be run elsewhere. The lease runtime and the sync timeout run
        it off the timer thread, so that a slow callback never delays another lease or timeout.
        None if the signal had already aborted, or no user callback waits.
        """
        pending = self._abort(reason, "abort_deferred")
        return functools.partial(_call_each, pending, reason, "a signal callback raised") if pending else None

    def _abort(self, reason: BaseException, method: str) -> list[Callable[[BaseException], object]] | None:
        """Mark this signal and its descendants aborted and wake their waiters; the user callbacks left to run.

        None if the signal had already aborted. `method` names the caller in the error about
        a reason that is not an exception.
        """
        if not isinstance(reason, BaseException):  # callers that ignore the types
            msg = f"Signal.{method}(reason): the reason must be an exception (it is raised), got {reason!r}"  # type: ignore[unreachable]
            raise ValidationError(msg)
        with _LOCK:
            if self._reason is not None:
                return None
            self._unlink()
            pending: list[Callable[[BaseException], object]] = []
            wakeups: list[Callable[[BaseException], object]] = []
            stack = [self]  # this signal and its descendants: set the reason, sort the callbacks
            while stack:
                signal = stack.pop()
                signal._reason = reason
                callbacks, signal._callbacks = signal._callbacks, None
                if callbacks:
                    for key, callback in callbacks.items():
                        if type(key) is Signal and key._reason is None:
                            key._parent = None
                            stack.append(key)
                        elif type(key) is CancelScope or type(key) is _Wakeup:
                            wakeups.append(callback)
                        else:
                            pending.append(callback)
        # Ours, not user code: each sets an event or schedules a wake-up. One that fails never
        # loses the other wake-ups (nor the callbacks: a Ctrl-C here is raised once they ran).
        try:
            _call_each(wakeups, reason, "waking a waiter for a signal failed")
        except BaseException:
            _call_each(pending, reason, "a signal callback raised")  # interrupted here: run them here
            raise
        return pending

    def raise_if_aborted(self) -> None:
        """Raise the reason if the signal has aborted."""
        reason = self._reason
        if reason is not None:
            raise reason

    def add_callback(self, callback: Callable[[BaseException], object]) -> Callable[[], None]:
        """Call `callback(reason)` once when the signal aborts (at once if it already has).

        Returns a function that removes the callback. Exceptions from the callback are logged.
        """
        return self._add(next(_ids), callback, "a signal callback raised")

    def add_wakeup(self, wakeup: Callable[[BaseException], object]) -> Callable[[], None]:
        """`add_callback` for a waiter's wake-up: tiny and never blocking (set an event, resolve a future).

        Wake-ups run on the aborting thread, before any `add_callback` callback, even when the
        abort is deferred (`abort_deferred`): a waiter is woken however many callbacks are slow.
        What one raises is logged.
        """
        return self._add(_Wakeup(), wakeup, "waking a waiter for a signal failed")

    def _add(self, key: object, callback: Callable[[BaseException], object], what: str) -> Callable[[], None]:
        """Register `callback` under `key`, or call it at once if the signal aborted; its remover."""
        reason = self._register(key, callback)
        if reason is not None:
            _call_each((callback,), reason, what)
            return lambda: None  # nothing to remove
        return lambda: self._remove(key)

    def _register(self, key: object, callback: Callable[[BaseException], object]) -> BaseException | None:
        """Add `callback` under `key` unless the signal aborted; return the reason if it had."""
        with _LOCK:
            reason = self._reason
            if reason is None:
                if self._callbacks is None:
                    self._callbacks = {}
                self._callbacks[key] = callback
        return reason

    def _remove(self, key: object) -> None:
        with _LOCK:
            if self._callbacks is not None:
                self._callbacks.pop(key, None)

    def child(self) -> Signal:
        """A new signal that aborts, with the same reason, when this one does."""
        child = Signal()
        self._adopt(child)
        return child

    def _adopt(self, child: Signal) -> BaseException | None:
        """Make `child` (a fresh signal) a child of this one; this one's reason if it had aborted."""
        # On every strategy's hot path: one lock round trip, no closure, no id counter.
        child._parent = self  # before it is registered: nobody else sees the child yet
        reason = self._register(child, child.abort)
        if reason is not None:
            child._parent = None
            child._reason = reason
        return reason

    def child_scope(self) -> CancelScope:
        """`async with signal.child_scope() as child:` watches a new child of this signal.

        The child is made a child of this signal as the block starts and detached as it ends,
        and the block is cancelled when the child aborts (its own abort, or this signal's):
        `child()`, `child.cancel_scope()` and `child.detach()` together, with one lock round
        trip at each end instead of two (the async timeout enters one per execution).
        """
        scope = CancelScope(Signal())
        scope._parent = self
        return scope

    def _unlink(self) -> None:
        # Under _LOCK: forget the parent, and the parent's callback to this child.
        parent, self._parent = self._parent, None
        if parent is not None and parent._callbacks is not None:
            parent._callbacks.pop(self, None)

    def detach(self) -> None:
        """Stop following the parent (a child whose work is over keeps no reference in it)."""
        if self._parent is not None:
            with _LOCK:
                self._unlink()

    def wait(self, timeout: Duration | None = None) -> bool:
        """Block until the signal aborts (True) or `timeout` seconds of real time pass (False)."""
        if self._reason is not None:
            return True
        timeout = None if timeout is None else max(to_seconds(timeout), 0.0)
        event = threading.Event()
        remove = self.add_wakeup(lambda _reason: event.set())
        try:
            return event.wait(timeout)
        finally:
            remove()

    async def wait_async(self, timeout: Duration | None = None) -> bool:
        """Suspend until the signal aborts (True) or `timeout` seconds of real time pass (False)."""
        if self._reason is not None:
            return True
        timeout = None if timeout is None else max(to_seconds(timeout), 0.0)
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()
        remove = self.add_wakeup(lambda _reason: resolve_threadsafe(loop, future))
        try:
            async with asyncio.timeout(timeout):  # None: no bound
                await future
        except TimeoutError:
            return self._reason is not None
        finally:
            remove()
        return True

    def cancel_scope(self) -> CancelScope:
        """`async with signal.cancel_scope():` cancels the current task when the signal aborts.

        If the block is cancelled because of this signal, the `CancelledError` is swallowed
        (`Task.uncancel`) and the signal's reason is raised instead; any other cancellation
        (the caller's, an outer timeout) passes through unchanged. A block that ends normally
        after the abort returns normally: it finished its work.
        """
        return CancelScope(self)

    def __repr__(self) -> str:
        state = f"aborted={self._reason!r}" if self._reason is not None else "active"
        return f"<Signal {state}>"


class CancelScope:
    """What `Signal.cancel_scope()` returns: an async context manager bound to the current task."""

    __slots__ = ("_active", "_baseline", "_parent", "_requested", "_signal", "_task", "loop")
    loop: asyncio.AbstractEventLoop
    """The event loop of the task the scope was entered in (set on entry; read it, never set it)."""

    def __init__(self, signal: Signal) -> None:
        self._signal = signal
        self._parent: Signal | None = None  # set by `Signal.child_scope`: adopt the signal on entry
        self._active = False
        self._requested = False

    async def __aenter__(self) -> Signal:
        loop = self.loop = asyncio.get_running_loop()
        task = asyncio.current_task(loop)
        if task is None:  # pragma: no cover - asyncio always has a current task here
            msg = "cancel_scope() must be entered inside an asyncio task"
            raise RuntimeError(msg)
        self._task = task
        self._baseline = task.cancelling()
        signal = self._signal
        self._active = True  # before registering: an abort right after it must cancel
        # Registered under the scope itself (no id, no removal closure): the async timeout
        # and hedging enter one per execution.
        parent = self._parent
        if parent is None:
            reason = signal._register(self, self._on_abort)
        else:  # a child nobody else holds before its adoption: watched without the lock
            signal._callbacks = {self: self._on_abort}
            reason = parent._adopt(signal)
        if reason is not None:
            self._active = False
            raise reason
        return signal

    def _on_abort(self, _reason: BaseException) -> None:
        try:  # on the loop's own thread (asked only when an abort comes, not on every entry)
            here = asyncio.get_running_loop() is self.loop
        except RuntimeError:  # a thread with no running loop
            here = False
        if here:
            self._cancel()
        else:
            with contextlib.suppress(RuntimeError):  # the loop closed: nothing left to cancel
                self.loop.call_soon_threadsafe(self._cancel)

    def _cancel(self) -> None:
        if self._active and not self._task.done():
            self._requested = True
            self._task.cancel()

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> bool:
        self._active = False
        signal = self._signal
        if self._parent is None:
            if signal._callbacks:  # unset once the signal aborted: nothing to remove then
                signal._remove(self)
        elif signal._callbacks or signal._parent is not None:  # forgotten and detached at once
            with _LOCK:  # `_unlink` inline: one frame less on every async timeout
                parent, signal._parent = signal._parent, None
                if signal._callbacks:
                    signal._callbacks.pop(self, None)
                if parent is not None and parent._callbacks is not None:
                    parent._callbacks.pop(signal, None)
        if not self._requested:
            return False
        task = self._task
        if exc_type is None or not issubclass(exc_type, asyncio.CancelledError):
            # The abort came from inside the block's own step and the block returned (or
            # raised something else) without awaiting again: our cancellation is still
            # pending, so absorb it here rather than leave it to the caller's next await.
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.sleep(0)
            if task.uncancel() > self._baseline:
                raise asyncio.CancelledError
            return False
        if task.uncancel() <= self._baseline:
            reason = self._signal.reason
            assert reason is not None
            raise reason from None
        return False


class _Wakeup:
    """The key a library wake-up is registered under (`Signal.add_wakeup`)."""

    __slots__ = ()
