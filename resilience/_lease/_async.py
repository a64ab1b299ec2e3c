"""The asyncio runtime of a lease: one scheduler per loop and clock, one short task per renewal.

Events sit in a `Scheduler` per (loop, clock) whose one timer comes from the time provider
(`call_later`); a timer that fires on another thread hops onto the loop. On the system clock
that is the shared timer thread (`lease_clock`: a freeze moves the loop's own clock, so a
loop timer could wait for the frozen year); a fake clock's timers fire wherever it is advanced.
Renewals on a store that answers at once (the memory stores) are sent right there, in
batches; a batch on a store that renews many in one call (`renew_many_async`: the Redis
stores pipeline it) is one task; any other renewal is a one-lease batch, a task of its own on
the lease's loop (never a step run outside a task). The deadline bounds each: a batch's task
is cancelled at the latest deadline in it (each lease in it is lost at its own).
The final release runs in its own task, shielded from the caller's cancellation and bounded
by `min(RELEASE_TIMEOUT, ttl)`.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import threading
import weakref
from typing import TYPE_CHECKING, Any, cast

from resilience._lease import _lease
from resilience._lease._lease import RELEASE_TIMEOUT, Batch, LeaseBase, LeaseParams, Scheduler, new_owner
from resilience._runtime._threads import interrupts_caller
from resilience.stores._steps import run_steps_async

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Coroutine

    from resilience._lease._core import AcquireSchedule
    from resilience._lease._ops import StoreOps
    from resilience._signal import Signal
    from resilience._time import TimeProvider, TimerHandle
    from resilience.exceptions import LockLostError

__all__ = ["RELEASE_TIMEOUT", "AsyncLease", "acquire_lease_async"]

_logger = logging.getLogger("resilience")

_BACKGROUND: set[asyncio.Task[Any]] = set()
"""Tasks nobody awaits (notifications, abandoned releases): referenced until done."""


def _spawn(loop: asyncio.AbstractEventLoop, coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
    task = loop.create_task(coro)
    _BACKGROUND.add(task)
    task.add_done_callback(_BACKGROUND.discard)
    return task


def _on_loop(loop: asyncio.AbstractEventLoop | None, thread: int, callback: Callable[[], object]) -> None:
    """Run `callback` on `loop` (whose thread is `thread`): now if already there; not at all if it is gone."""
    if loop is None or loop.is_closed():
        return
    if threading.get_ident() == thread:
        callback()
    else:
        with contextlib.suppress(RuntimeError):  # the loop closed: nothing left to do
            loop.call_soon_threadsafe(callback)


def _dispatch_async(batches: list[Batch]) -> None:
    """On the loop: renewals sent at once (a store that answers at once) or as tasks."""
    for batch in batches:
        first = batch.leases[0]
        ops = first._ops
        if ops.inline:
            batch.run()  # an in-process store answers at once: no task needed
            continue
        loop = cast("AsyncLease", first)._loop_ref()  # the leases' own (a scheduler is one loop's)
        if loop is None or loop.is_closed():
            continue  # the loop is gone, and its leases with it
        # A store without `renew_many_async` renews each lease alone: one that hangs costs only its lease.
        for each in [batch] if ops.renews_many_async else [Batch([lease]) for lease in batch.leases]:
            _spawn(loop, _renew_batch(each, loop))


async def _renew_batch(batch: Batch, loop: asyncio.AbstractEventLoop) -> None:
    """Renew a batch in one store call (`renew_many_async`: one pipelined round trip on Redis), in a task.

    A task of its own on the leases' loop: a store call may enter `asyncio.timeout` (redis-py
    does on 3.11.3+), which needs a current task, and a step run outside one fails on 3.12+.

    Bounded by the latest deadline among its leases, on their clock: a lease whose deadline
    comes earlier is lost by the batch's heap entry meanwhile (its late answer is then
    ignored), and when the bound fires every lease still unanswered has run out of time.
    """
    leases = batch.leases
    sent, todo, items = batch.start()
    got: list[bool | Exception] = []
    if todo:
        task = asyncio.current_task()
        assert task is not None
        thread = threading.get_ident()
        timed_out = False

        def bound() -> None:
            nonlocal timed_out
            timed_out = True
            _on_loop(loop, thread, task.cancel)

        timer = leases[0]._tp.call_later(max(leases[n]._machine.deadline for n in todo) - sent, bound)
        try:
            got = await leases[0]._ops.renew_many_async(items)
        except asyncio.CancelledError:
            if not timed_out:  # pragma: no cover - the loop is shutting down
                raise
            for n in todo:
                leases[n]._input(lambda machine, _now: machine.renew_timed_out())
            return
        finally:
            timer.cancel()
    batch.answered(sent, todo, got)


_RECHECK = 0.1
"""How often a scheduler whose timer fired while its loop was stopped looks at the loop again (seconds)."""

_SCHEDULERS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[int, tuple[TimeProvider, Scheduler]]] = (
    weakref.WeakKeyDictionary()
)


def _scheduler_for(loop: asyncio.AbstractEventLoop, time_provider: TimeProvider) -> Scheduler:
    """The one `Scheduler` of a loop and clock (created on the loop's thread)."""
    schedulers = _SCHEDULERS.get(loop)
    if schedulers is None:
        schedulers = _SCHEDULERS[loop] = {}
    entry = schedulers.get(id(time_provider))
    if entry is None:
        entry = schedulers[id(time_provider)] = (time_provider, _new_scheduler(loop, time_provider))
    return entry[1]


def _new_scheduler(loop: asyncio.AbstractEventLoop, time_provider: TimeProvider) -> Scheduler:
    """A `Scheduler` whose timer fires on `loop` (its thread), or forgets its leases once the loop is closed."""
    thread = threading.get_ident()
    # Weakly: the scheduler (the registry's value) must not keep its loop (the key) alive,
    # or no closed loop would ever be freed.
    loop_ref = weakref.ref(loop)

    def fired(callback: Callable[[], object]) -> None:
        target = loop_ref()
        _on_loop(target, thread, callback)  # not at all when the loop is gone
        if threading.get_ident() != thread or target is None or target.is_closed():
            stopped()  # a closed loop's leases are forgotten; a stopped one is looked at again

    def stopped() -> None:
        # The hop waits in a stopped loop, and `close` would drop it: the scheduler would
        # wait for a firing that never comes, its heap keeping the loop. Looked at again
        # until the loop runs (the hop with it) or is closed (its leases forgotten).
        target = loop_ref()
        if target is None or target.is_closed():
            # The loop is gone, and its leases with it: forget them. An ended lease left in
            # the heap can still reach the loop (its loss error's traceback, its tag's
            # context), which would keep the loop alive for good.
            with _lease._LOCK:
                scheduler._heap.clear()
            if target is not None:
                _SCHEDULERS.pop(target, None)
        elif not target.is_running():
            time_provider.call_later(_RECHECK, stopped)

    def call_later(delay: float, callback: Callable[[], object]) -> TimerHandle:
        return time_provider.call_later(delay, lambda: fired(callback))

    scheduler = Scheduler(time_provider, call_later, _dispatch_async)
    return scheduler


async def _call_async_hook(hook: Callable[..., object], *args: object) -> None:
    try:
        result = hook(*args)
        if inspect.isawaitable(result):
            await result
    except asyncio.CancelledError:
        raise
    except BaseException as error:
        if interrupts_caller(error):
            raise
        _logger.exception("a lease callback raised")


class AsyncLease(LeaseBase):
    """A lease held by a coroutine on one event loop."""

    __slots__ = ("_hook", "_loop_ref", "_thread", "_waiter")

    def _bind(self, time_provider: TimeProvider) -> Scheduler:
        loop = asyncio.get_running_loop()
        # Weakly, as the scheduler does: an ended lease left in the heap must not keep a closed loop.
        self._loop_ref = weakref.ref(loop)
        self._thread = threading.get_ident()
        self._hook: asyncio.Task[None] | None = None  # the hook task started last
        self._waiter: asyncio.Future[None] | None = None  # a holder waiting for `_told`
        return _scheduler_for(loop, time_provider)

    def _abandon(self) -> None:
        _release_in_background(self._ops, self.store_key, self.owner, self._tp)

    def _deliver(self, run: Callable[[], None]) -> None:
        _on_loop(self._loop_ref(), self._thread, run)  # the lease's own loop: where its holder's callbacks belong

    def _call_hook(self, hook: Callable[..., object], *args: object) -> None:
        loop = self._loop_ref()
        if loop is not None:
            _on_loop(loop, self._thread, lambda: self._start_hook(loop, _call_async_hook(hook, *args)))

    def _start_hook(self, loop: asyncio.AbstractEventLoop, hook: Coroutine[Any, Any, None]) -> None:
        self._hook = _spawn(loop, hook)

    def _loss_told(self) -> None:
        _on_loop(self._loop_ref(), self._thread, self._after_hook)  # after `_call_hook`'s, in order

    def _after_hook(self) -> None:
        hook = self._hook
        if hook is None or hook.done():
            self._tell()
        else:
            hook.add_done_callback(lambda _task: self._tell())

    def _tell(self) -> None:
        told = self._told
        if told is not None:
            told.set()
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def extend_async(self, ttl: float | None = None) -> bool:
        """See `Lease.extend`; a cancellation the store swallowed is raised."""
        renew = self._ops.store.renew_async
        return await run_steps_async(self._extending(ttl, lambda *args: _uncancelled(renew(*args))))

    async def release_async(self) -> bool:
        """See `Lease.release`; a cancellation the store swallowed is raised."""
        return self._holder_releases() and await _uncancelled(self._ops.store.release_async(self.store_key, self.owner))

    async def finish_async(self) -> LockLostError | None:
        """See `Lease.finish`; the release is shielded from cancellation and bounded in time.

        A loss's callbacks (`on_lost`) have run when it returns.
        """
        if self._ending():
            ops = self._ops
            if ops.inline:  # an in-process store answers at once, here: no coroutine (`_release_bounded`)
                released = _lease._release_quietly(ops, self.store_key, self.owner)
            else:
                released = await _release_bounded(
                    ops, self.store_key, self.owner, self._tp, min(RELEASE_TIMEOUT, self._machine.ttl)
                )
            if not released:  # someone else holds the key: lost (True changes nothing)
                self._input(lambda machine, _now: machine.release_answered(ok=False))
        told = self._told
        if self._error is not None and told is not None and not told.is_set():
            # The loss's callbacks run on this loop: the holder returns once they have.
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            except BaseException:
                self._detach()  # cancelled while waiting: the lease's signal leaves its parent all the same
                raise
        return self._detach()


async def _release_bounded(
    ops: StoreOps, key: str, owner: str, time_provider: TimeProvider, bound: float = RELEASE_TIMEOUT
) -> bool:
    """Release, shielded from the caller's cancellation and abandoned after `bound` seconds.

    An in-process store (`ops.inline`) answers at once: no task, shield or timer. Any other
    release runs whole in a task of its own that the caller awaits through a shield (never a
    first step in the caller's task: a store's `asyncio.timeout` entered there would later
    cancel the caller). Errors and the timeout count as "released" (ignored: the
    lease expires anyway). If the caller is cancelled meanwhile, the release goes on in the
    background and the cancellation propagates.
    """
    if ops.inline:
        return _lease._release_quietly(ops, key, owner)
    loop = asyncio.get_running_loop()
    task = _spawn(loop, ops.store.release_async(key, owner))
    thread = threading.get_ident()
    timer = time_provider.call_later(bound, lambda: _on_loop(loop, thread, task.cancel))
    task.add_done_callback(lambda _task: timer.cancel())
    current, baseline = _cancel_baseline()
    try:
        return bool(await asyncio.shield(task))
    except asyncio.CancelledError:
        if task.cancelled() and (current is None or current.cancelling() <= baseline):
            _logger.debug("a lease release took longer than %ss and was abandoned", bound)
            return True
        raise
    except Exception:
        _logger.debug("a lease release failed", exc_info=True)
        return True


async def acquire_lease_async(
    ops: StoreOps,
    key: str,
    *,
    params: LeaseParams,
    schedule: AcquireSchedule | None,
    time_provider: TimeProvider,
    signal: Signal | None,
    owner: str | None = None,
    tag: object = None,
) -> tuple[AsyncLease | None, float | None]:
    """See `acquire_lease`; an interrupted acquire releases its owner id in the background."""
    owner = owner or new_owner()
    named, key = key, ops.prefix + key  # the lease reports `named`; the store holds `key`
    queued = ops.fair and schedule is not None
    inline = ops.inline
    # Only an await lets a cancellation in: an acquire that never waits on an in-process store needs no baseline.
    task, baseline = _cancel_baseline() if schedule is not None or not inline else (None, 0)
    while True:
        if signal is not None and signal._reason is not None:
            raise signal._reason
        sent = time_provider.monotonic()
        try:
            if inline:  # an in-process store answers at once: its sync call, no coroutine (`StoreOps.inline`)
                token, held_for = ops.queue(key, owner, params.ttl) if queued else ops.acquire(key, owner, params.ttl)
            else:
                token, held_for = await (
                    ops.queue_async(key, owner, params.ttl) if queued else ops.acquire_async(key, owner, params.ttl)
                )
                _raise_if_cancelling(task, baseline)
        except BaseException as exc:
            _release_in_background(ops, key, owner, time_provider)
            _raise_if_cancelling(task, baseline, exc)
            raise
        if token is not None:
            grant = (owner, token, sent, tag)
            return AsyncLease(ops, named, key, grant, params=params, time_provider=time_provider, parent=signal), None
        if schedule is None or (wait := schedule.next_wait(time_provider.monotonic(), held_for)) is None:
            if queued:  # leave the queue: the turn passes on
                await _release_bounded(ops, key, owner, time_provider)
            return None, held_for
        await _wait_turn(
            ops, key, wait, schedule, time_provider=time_provider, signal=signal, owner=owner, cancel=(task, baseline)
        )


async def _wait_turn(
    ops: StoreOps,
    key: str,
    wait: float,
    schedule: AcquireSchedule,
    *,
    time_provider: TimeProvider,
    signal: Signal | None,
    owner: str,
    cancel: tuple[asyncio.Task[Any] | None, int],
) -> None:
    """Wait up to `wait` before the next attempt; tell `schedule` when a release ended the wait.

    The wait is for a release notification (for a queued waiter: its turn), or just a sleep;
    the signal aborting raises its reason. A queued waiter (`ops.fair`) that is interrupted
    leaves the queue in the background.
    """
    task, baseline = cancel
    released = False
    try:
        async with contextlib.nullcontext() if signal is None else signal.cancel_scope():
            if ops.notify_async:
                released = await ops.wait_released_async(key, wait, owner)
            else:
                await time_provider.sleep_async(wait)
        _raise_if_cancelling(task, baseline)
    except BaseException as exc:
        if ops.fair:
            _release_in_background(ops, key, owner, time_provider)
        _raise_if_cancelling(task, baseline, exc)
        raise
    if released:
        schedule.woken(time_provider.monotonic())


def _cancel_baseline() -> tuple[asyncio.Task[Any] | None, int]:
    """The current task and its `cancelling()` count now (see `_raise_if_cancelling`)."""
    task = asyncio.current_task()
    return task, 0 if task is None else task.cancelling()


async def _uncancelled(call: Awaitable[object]) -> bool:
    """Await a holder's store call: its answer as a bool; a cancellation the store swallowed is raised.

    See `_raise_if_cancelling`.
    """
    task, baseline = _cancel_baseline()
    try:
        answer = await call
    except Exception as exc:  # a cancellation the client turned into an error is a cancellation
        _raise_if_cancelling(task, baseline, exc)
        raise
    _raise_if_cancelling(task, baseline)
    return bool(answer)


def _release_in_background(ops: StoreOps, key: str, owner: str, time_provider: TimeProvider) -> None:
    with contextlib.suppress(RuntimeError):  # no running loop any more: nothing to send it on
        _spawn(asyncio.get_running_loop(), _release_bounded(ops, key, owner, time_provider))


def _raise_if_cancelling(task: asyncio.Task[Any] | None, baseline: int, cause: BaseException | None = None) -> None:
    """After a store await: raise `CancelledError` if the task was cancelled meanwhile.

    A client may swallow the cancellation (redis-py's asyncio client on Python 3.11 returns the
    reply, or raises an error of its own): the task would carry on as if never cancelled.
    `baseline` is the task's `cancelling()` when the operation began.
    """
    if task is not None and task.cancelling() > baseline and not isinstance(cause, asyncio.CancelledError):
        raise asyncio.CancelledError from cause
