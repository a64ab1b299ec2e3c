"""A held lease: its signal, deadline, background renewal, loss detection and release.

`LeaseBase` holds what both shells share (state, the loss decision, scheduling); `Lease` (here)
and `AsyncLease` (`_async.py`) perform the store I/O. One parameter set (`LeaseParams`) serves
the lock strategy (renew every ttl/3) and the primitives (heartbeat ttl/4, or none; no deadline
watch for a bare `acquire` handle).

Each lease has one pending event, the earlier of its next renewal and its deadline. A sync
lease's event sits in its clock's `Scheduler` (one heap and one armed timer per clock, served
by the timer thread); an async lease's is one loop timer. The event callback decides (`_due`):
declare the loss there and then, or hand a renewal to the store's pool, which never blocks the
timer.

Loss (DESIGN §2.7 step 4) is decided in exactly one place, `_lose`, reached from:

- the deadline event (independent of any renewal in flight),
- a renewal answered False, or answered True only after the local deadline had passed,
- `extend` answered False,
- `finish`: the deadline checked again when the body ends, and a final release answered False.

`_lose` marks the lease's signal aborted with the lease's `LockLostError` at once, then hands
the signal's callbacks and the loss notification to where the lease's user code runs (sync: its
strand of the callback pool; async: its loop), once per lease. Every state change happens
under one module lock held for a few assignments only, never across a store call, a callback
or telemetry.
"""

from __future__ import annotations

import contextlib
import heapq
import inspect
import itertools
import logging
import os
import secrets
import threading
import weakref
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from resilience._lease._core import LeaseTimeline
from resilience._lease._workers import CALLBACKS, Strand, fork_generation, store_pool
from resilience._signal import Signal
from resilience._time import SystemTimeProvider, sync_call_later
from resilience.exceptions import LockLostError

if TYPE_CHECKING:
    from collections.abc import Callable

    from resilience._lease._core import AcquireSchedule
    from resilience._lease._ops import StoreOps
    from resilience._time import TimeProvider, TimerHandle

__all__ = ["Lease", "LeaseBase", "LeaseParams", "acquire_lease", "new_owner"]

_logger = logging.getLogger("resilience")

_LOCK = threading.Lock()
_LIVE: dict[int, LeaseBase] = {}
"""Leases whose body still runs (for `os.fork`): id -> lease."""

_NEVER = float("inf")

_NOTIFY_SLICE = 0.05
"""A sync wait on a store that only offers a blocking `wait_released` checks its signal this often."""


def new_owner() -> str:
    """A random owner id, 128 bits, unique to one execution (or one primitive acquisition)."""
    return secrets.token_hex(16)


class Scheduler:
    """The pending events of every sync lease on one clock: one heap, one armed timer.

    Arming a lease's event is a heap push under the lease lock; the clock's timer is re-armed
    only when the new event is the earliest (steady traffic on one ttl never re-arms it). The
    timer callback only pops what is due and hands it on (`_due`: a loss is declared right
    there, a renewal is queued on the store's pool), so a renewal that hangs never delays
    a deadline. Entries of ended leases are dropped lazily, and the heap is compacted when
    they outnumber the live ones.
    """

    __slots__ = ("_armed_at", "_heap", "_seq", "_timer", "_tp", "stale")

    def __init__(self, time_provider: TimeProvider) -> None:
        self._tp = time_provider
        self._heap: list[tuple[float, int, Lease]] = []
        self._seq = itertools.count()
        self._timer: TimerHandle | None = None
        self._armed_at = _NEVER
        self.stale = 0

    def schedule(self, when: float, lease: Lease) -> None:
        """Run `lease._due()` at `when` (under _LOCK; the lease set its `_scheduled_at`)."""
        heap = self._heap
        if self.stale > _COMPACT_AT and self.stale * 2 > len(heap):
            heap[:] = [entry for entry in heap if entry[2]._scheduled_at == entry[0]]
            heapq.heapify(heap)
            self.stale = 0
        heapq.heappush(heap, (when, next(self._seq), lease))
        if when < self._armed_at:
            self._arm(when)

    def _arm(self, when: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._armed_at = when
        self._timer = sync_call_later(self._tp, when - self._tp.monotonic(), self._fire)

    def _fire(self) -> None:
        due: list[Lease] = []
        with _LOCK:
            self._timer = None
            self._armed_at = _NEVER
            now = self._tp.monotonic()
            heap = self._heap
            while heap and heap[0][0] <= now:
                when, _, lease = heapq.heappop(heap)
                if lease._scheduled_at == when:
                    lease._scheduled_at = _NEVER
                    due.append(lease)
                else:
                    self.stale = max(0, self.stale - 1)
            if heap:
                self._arm(heap[0][0])
        for lease in due:
            try:
                lease._due()
            except Exception:  # pragma: no cover - defensive: one lease never stops the others
                _logger.exception("a lease event failed")

    def __len__(self) -> int:
        return len(self._heap)


_COMPACT_AT = 1024
_SCHEDULERS: weakref.WeakKeyDictionary[TimeProvider, Scheduler] = weakref.WeakKeyDictionary()
_STRONG_SCHEDULERS: dict[int, tuple[TimeProvider, Scheduler]] = {}


def scheduler_for(time_provider: TimeProvider) -> Scheduler:
    """The one `Scheduler` of a clock (weakly keyed; kept for the process if it cannot be)."""
    entry = _STRONG_SCHEDULERS.get(id(time_provider))
    if entry is not None:
        return entry[1]
    try:
        scheduler = _SCHEDULERS.get(time_provider)
        if scheduler is None:
            with _LOCK:
                scheduler = _SCHEDULERS.setdefault(time_provider, Scheduler(time_provider))
    except TypeError:  # the system clock and other slotted clocks cannot be weakly referenced
        with _LOCK:
            entry = _STRONG_SCHEDULERS.setdefault(id(time_provider), (time_provider, Scheduler(time_provider)))
        scheduler = entry[1]
    return scheduler


@dataclass(frozen=True, slots=True)
class LeaseParams:
    """How a lease behaves once held.

    - `ttl`: the lease length asked of the store (seconds).
    - `renew_interval`: background renewal period, or None for no background renewal.
    - `watch_deadline`: abort the signal when the local deadline passes (and check it again at
      `finish`). False only for a bare primitive `acquire` handle, which only its own
      `extend()` answered False can abort.
    - `error_type`: the loss error (`LockLostError`, `SemaphoreLeaseLostError`).
    - `on_lost(lease)`: told once, off the timer thread, after the signal aborted (`lease.error`).
    - `on_renew_error(lease, exc)`: told off the timer thread when a renewal raised (not a loss).

    Callback exceptions are logged, never raised; an awaitable they return is awaited in an
    async lease (and closed, with a log record, in a sync one).
    """

    ttl: float
    renew_interval: float | None
    watch_deadline: bool = True
    error_type: type[LockLostError] = LockLostError
    on_lost: Callable[[LeaseBase], object] | None = None
    on_renew_error: Callable[[LeaseBase, Exception], object] | None = None


class LeaseBase:
    """State shared by the sync and async leases; see the module docstring."""

    __slots__ = (
        "_ended",
        "_error",
        "_generation",
        "_in_flight",
        "_loss",
        "_ops",
        "_params",
        "_renew_at",
        "_scheduled_at",
        "_timeline",
        "_tp",
        "acquired_at",
        "key",
        "owner",
        "signal",
        "tag",
        "token",
    )

    def __init__(
        self,
        ops: StoreOps,
        key: str,
        owner: str,
        token: int,
        *,
        params: LeaseParams,
        time_provider: TimeProvider,
        parent: Signal | None,
        sent_at: float,
        tag: object = None,
    ) -> None:
        self.tag = tag
        """The caller's own per-lease state (the hooks get the lease, and so the tag)."""
        self._ops = ops
        self.key = key
        self.owner = owner
        self.token = token
        self._params = params
        self._tp = time_provider
        self.signal: Signal = Signal() if parent is None else parent.child()
        self._loss: Signal | None = None
        self._timeline = LeaseTimeline(params.ttl, params.renew_interval, sent_at, time_provider.monotonic())
        self._error: LockLostError | None = None
        self._ended = False
        self._in_flight = False
        self._renew_at: float | None = None
        self._scheduled_at = _NEVER
        self._generation = fork_generation()
        self.acquired_at = time_provider.monotonic()

    # -- what a handle shows ------------------------------------------------------------------

    @property
    def error(self) -> LockLostError | None:
        """The loss error once the lease is known lost, else None."""
        return self._error

    @property
    def lost(self) -> bool:
        """Whether the lease is known lost."""
        return self._error is not None

    @property
    def ended(self) -> bool:
        """Whether the lease was released or finished (renewal stopped)."""
        return self._ended

    @property
    def ttl(self) -> float:
        """The current lease length (the last `extend` may have changed it)."""
        return self._timeline.ttl

    @property
    def deadline(self) -> float:
        """The local deadline on the time provider's monotonic clock."""
        return self._timeline.deadline

    def expires_in(self) -> float:
        """Seconds left until the local deadline (0 when passed)."""
        return max(0.0, self._timeline.deadline - self._tp.monotonic())

    def loss_signal(self) -> Signal:
        """A signal that aborts only when the lease is lost (not when the parent aborts).

        What `cancel_on_lost` cancels the body with.
        """
        with _LOCK:
            loss = self._loss
            if loss is None:
                loss = self._loss = Signal()
            error = self._error
        if error is not None:
            loss.abort(error)
        return loss

    def _forked(self) -> bool:
        return self._generation != fork_generation()

    # -- scheduling ---------------------------------------------------------------------------
    #
    # A lease has one pending event at a time: the earlier of its next renewal and (when
    # watched) its deadline, at `_scheduled_at`. `_arm` makes `_due()` run then (sync: an entry
    # in the clock's shared heap; async: one loop timer); `_forget` drops it. An event that is
    # armed earlier than needed just fires, finds nothing to do, and re-arms.

    def _arm(self, when: float, now: float, *, replacing: bool) -> None:
        raise NotImplementedError

    def _forget(self) -> None:
        raise NotImplementedError

    def _reschedule(self, now: float) -> None:
        """Arm the next event if none is armed at or before it (under _LOCK)."""
        # A renewal due while one is in flight waits for its answer (`_renewed` re-arms).
        target = _NEVER if self._renew_at is None or self._in_flight else self._renew_at
        if self._params.watch_deadline:
            target = min(target, self._timeline.deadline)
        if target < self._scheduled_at:
            replacing = self._scheduled_at != _NEVER
            self._scheduled_at = target
            self._arm(target, now, replacing=replacing)

    def _begin(self, sent_at: float) -> None:
        """Start watching a freshly acquired lease."""
        with _LOCK:
            _LIVE[id(self)] = self
            self._renew_at = self._timeline.first_renewal(sent_at)
            self._reschedule(self._tp.monotonic())

    def _due(self) -> None:
        """The armed event fired (its entry is already consumed): lose, renew, or re-arm."""
        if self._forked():
            return
        lose = False
        ttl = None
        with _LOCK:
            if self._ended or self._error is not None:
                return
            now = self._tp.monotonic()
            if self._params.watch_deadline and self._timeline.expired(now):
                lose = True
            else:
                renew_at = self._renew_at
                if renew_at is not None and now >= renew_at and not self._in_flight:
                    self._renew_at = None
                    self._in_flight = True
                    ttl = self._timeline.ttl
                self._reschedule(now)  # the deadline stays watched while a renewal is in flight
        if lose:
            self._lose(inline=False)
        elif ttl is not None:
            self._start_renewal(ttl)

    def _start_renewal(self, ttl: float) -> None:
        raise NotImplementedError

    def _renewed(self, sent: float, ttl: float, ok: bool, failure: Exception | None) -> None:
        """Act on a renewal's answer (`ok`) or its error (`failure`) (in the background)."""
        lose = False
        with _LOCK:
            self._in_flight = False
            if self._ended or self._error is not None:
                return  # a renewal in flight when the body ended, or after the loss: ignored
            now = self._tp.monotonic()
            if failure is not None:
                self._renew_at = self._timeline.failed(now)
                self._reschedule(now)
            elif not ok or self._timeline.expired(now):
                lose = True
            else:
                self._renew_at = self._timeline.renewed(sent, now, ttl)
                self._reschedule(now)
        if lose:
            self._lose(inline=False)
        elif failure is not None and self._params.on_renew_error is not None:
            self._call_hook(self._params.on_renew_error, self, failure)

    def _extended(self, sent: float, ttl: float, ok: bool) -> bool:
        if not ok:
            self._lose(inline=True)
            return False
        with _LOCK:
            if self._error is not None:
                return False
            now = self._tp.monotonic()
            self._renew_at = self._timeline.renewed(sent, now, ttl, extend=True)
            if not self._ended:
                self._reschedule(self._tp.monotonic())  # a shorter ttl pulls the deadline in
        return True

    # -- loss and the end ---------------------------------------------------------------------

    def _lose(self, *, inline: bool) -> None:
        """Declare the lease lost, once: the signal(s) read as aborted at once; then callbacks.

        `inline`: called on the holder's own thread (`extend`, `finish`), where the signal's
        callbacks run at once; in the background (the timer, a store's thread) they are handed
        to the lease's callbacks (`_deliver`), so that user code never delays another lease.
        """
        with _LOCK:
            if self._error is not None:
                return
            error = self._error = self._params.error_type(self.key, self.token)
            self._forget()
            _LIVE.pop(id(self), None)
            loss = self._loss
        runs = [self.signal._abort_deferred(error)]
        if loss is not None:
            runs.insert(0, loss._abort_deferred(error))
        self._after_loss()
        for run in runs:
            if run is not None:
                if inline:
                    run()
                else:
                    self._deliver(run)
        if self._params.on_lost is not None:
            self._call_hook(self._params.on_lost, self)

    def _after_loss(self) -> None:
        """Shell-specific clean-up right after a loss (the async shell cancels a renewal)."""

    def _deliver(self, run: Callable[[], None]) -> None:
        """Run signal callbacks (`run()`) where user code of this lease runs."""
        raise NotImplementedError

    def _call_hook(self, hook: Callable[..., object], *args: object) -> None:
        """Run `hook(*args)` where user code of this lease runs, after its earlier callbacks.

        Exceptions are logged; an awaitable is awaited in async.
        """
        raise NotImplementedError

    def _stop(self) -> bool:
        """Stop renewal and the deadline watch; False if the lease had already ended."""
        with _LOCK:
            if self._ended:
                return False
            self._ended = True
            self._forget()
            _LIVE.pop(id(self), None)
        return True

    def _check_deadline(self) -> None:
        if self._params.watch_deadline and self._timeline.expired(self._tp.monotonic()):
            self._lose(inline=True)

    def _abandon_in_child(self) -> None:  # pragma: no cover - runs in a forked child (test_lock_fork.py)
        # After os.fork(), in the child: the parent still holds (and renews) this lease.
        self._ended = True
        self._scheduled_at = _NEVER
        if self._error is None:
            self._error = self._params.error_type(self.key, self.token)
        with contextlib.suppress(Exception):
            if self._loss is not None:
                self._loss.abort(self._error)
            self.signal.abort(self._error)

    def __repr__(self) -> str:
        state = "lost" if self._error is not None else "ended" if self._ended else "held"
        return f"<{type(self).__name__} key={self.key!r} token={self.token} {state}>"


def _call_sync_hook(hook: Callable[..., object], *args: object) -> None:
    try:
        result = hook(*args)
    except BaseException:
        _logger.exception("a lease callback raised")
        return
    if inspect.isawaitable(result):
        close = getattr(result, "close", None)
        if callable(close):
            close()
        _logger.error("a lease callback returned an awaitable in a sync execution; it was not awaited")


class Lease(LeaseBase):
    """A lease held by sync code: events in its clock's heap, store calls on the store's pool.

    Its callbacks run in order on its own strand of the callback pool (`_workers`).
    """

    __slots__ = ("_scheduler", "_strand")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._scheduler = scheduler_for(self._tp)
        self._strand: Strand | None = None

    def _arm(self, when: float, now: float, *, replacing: bool) -> None:  # noqa: ARG002 - see Scheduler
        if replacing:
            self._scheduler.stale += 1
        self._scheduler.schedule(when, self)

    def _forget(self) -> None:
        if self._scheduled_at != _NEVER:
            self._scheduled_at = _NEVER
            self._scheduler.stale += 1

    def _start_renewal(self, ttl: float) -> None:
        store_pool(self._ops.pool_owner).submit(lambda: self._renew_job(ttl))

    def _renew_job(self, ttl: float) -> None:
        sent = self._tp.monotonic()
        if self._timeline.expired(sent):
            self._renewed(sent, ttl, ok=False, failure=None)
            return
        try:
            ok = self._ops.renew(self.key, self.owner, ttl)
        except Exception as exc:  # noqa: BLE001 - a failed renewal is reported, then retried
            self._renewed(sent, ttl, ok=False, failure=exc)
            return
        self._renewed(sent, ttl, ok=ok, failure=None)

    def _callbacks(self) -> Strand:
        strand = self._strand
        if strand is None:
            with _LOCK:
                strand = self._strand
                if strand is None:
                    strand = self._strand = Strand(CALLBACKS)
        return strand

    def _deliver(self, run: Callable[[], None]) -> None:
        self._callbacks().submit(run)

    def _call_hook(self, hook: Callable[..., object], *args: object) -> None:
        self._callbacks().submit(lambda: _call_sync_hook(hook, *args))

    def extend(self, ttl: float | None = None) -> bool:
        """Push the lease out to now + `ttl` (default: the lease's ttl); False if it is gone.

        False also aborts the signal (the lease is lost). Store errors propagate.
        """
        if self._forked() or self._ended or self._error is not None:
            return False
        ttl = self._timeline.ttl if ttl is None else ttl
        sent = self._tp.monotonic()
        ok = self._ops.renew(self.key, self.owner, ttl)
        return self._extended(sent, ttl, ok)

    def release(self) -> bool:
        """Stop renewal and free the key if this owner still holds it (True only then).

        Called by the holder itself (a primitive handle); the final `finish` then sends no
        second release. Store errors propagate.
        """
        if self._forked() or not self._stop():
            return False
        return self._ops.release(self.key, self.owner)

    def finish(self) -> LockLostError | None:
        """End the lease when the body ends; the loss error, if the lease was lost.

        Stops renewal (a renewal in flight is ignored), checks the deadline again, sends
        exactly one release (ignoring its errors; False means lost), and detaches the signal.
        """
        if self._stop() and not self._forked():
            self._check_deadline()
            try:
                released = self._ops.release(self.key, self.owner)
            except Exception:  # noqa: BLE001 - a failed release is ignored: the lease expires anyway
                released = True
            if not released:
                self._lose(inline=True)
        self.signal.detach()
        return self._error


def _sync_wait(ops: StoreOps, key: str, seconds: float, time_provider: TimeProvider, signal: Signal) -> None:
    """Wait up to `seconds`, woken early by a release or the signal (then raise its reason)."""
    if ops.listen is None and ops.notify:
        end = time_provider.monotonic() + seconds
        while not signal.aborted:
            left = end - time_provider.monotonic()
            if left <= 0 or ops.wait_released(key, min(left, _NOTIFY_SLICE)):
                break
        signal.raise_if_aborted()
        return
    if getattr(time_provider, "auto_advance", False):
        time_provider.sleep(seconds)  # a fake clock that moves when slept on
        signal.raise_if_aborted()
        return
    woken = threading.Event()
    timer = (
        None if isinstance(time_provider, SystemTimeProvider) else sync_call_later(time_provider, seconds, woken.set)
    )
    remove_signal = signal.add_callback(lambda _reason: woken.set())
    remove_listener = None if ops.listen is None else ops.listen(key, woken.set)
    try:
        woken.wait(seconds if timer is None else None)
    finally:
        if timer is not None:
            timer.cancel()
        remove_signal()
        if remove_listener is not None:
            remove_listener()
    signal.raise_if_aborted()


def acquire_lease(
    ops: StoreOps,
    key: str,
    *,
    params: LeaseParams,
    schedule: AcquireSchedule | None,
    time_provider: TimeProvider,
    signal: Signal | None,
    owner: str | None = None,
    tag: object = None,
) -> tuple[Lease | None, float | None]:
    """Acquire `key`, waiting as `schedule` says: `(lease, None)` or `(None, holder's time left)`.

    The lease's signal is a child of `signal`, which also ends any wait at once (its reason is
    raised). Store errors propagate unchanged; an acquire interrupted by anything (an error,
    KeyboardInterrupt) first sends a best-effort release for its owner id, in case the store
    granted the lease but the reply was lost.
    """
    owner = owner or new_owner()
    ttl = params.ttl
    while True:
        if signal is not None:
            signal.raise_if_aborted()
        sent = time_provider.monotonic()
        try:
            token, held_for = ops.acquire(key, owner, ttl)
        except BaseException:
            _release_in_background(ops, key, owner)
            raise
        if token is not None:
            if signal is not None and signal.aborted:
                _release_quietly(ops, key, owner)  # the store just answered: no reason to wait
                signal.raise_if_aborted()
            lease = Lease(
                ops, key, owner, token, params=params, time_provider=time_provider, parent=signal, sent_at=sent, tag=tag
            )
            lease._begin(sent)
            return lease, None
        wait = None if schedule is None else schedule.next_wait(time_provider.monotonic(), held_for)
        if wait is None:
            return None, held_for
        _sync_wait(ops, key, wait, time_provider, signal or Signal())


def _release_quietly(ops: StoreOps, key: str, owner: str) -> None:
    try:
        ops.release(key, owner)
    except Exception:
        _logger.debug("best-effort release of an interrupted acquire failed", exc_info=True)


def _release_in_background(ops: StoreOps, key: str, owner: str) -> None:
    """The best-effort release of an acquire that failed or was interrupted.

    In case the store granted the lease but the reply was lost. Sent on the store's pool, never
    in the caller's thread: a store that is down would make the caller wait out a second
    timeout (an in-process store answers at once, so it is released right here).
    """
    if ops.inline:
        _release_quietly(ops, key, owner)
    else:
        store_pool(ops.pool_owner).submit(lambda: _release_quietly(ops, key, owner))


def _after_fork_in_child() -> None:  # pragma: no cover - runs in a forked child (test_lock_fork.py)
    global _LOCK  # noqa: PLW0603 - a lock held by a parent thread at fork time stays held in the child
    _LOCK = threading.Lock()
    _SCHEDULERS.clear()  # their timers died with the parent's threads
    _STRONG_SCHEDULERS.clear()
    leases = list(_LIVE.values())
    _LIVE.clear()
    for lease in leases:
        lease._abandon_in_child()


os.register_at_fork(after_in_child=_after_fork_in_child)
