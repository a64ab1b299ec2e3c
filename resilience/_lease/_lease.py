"""A held lease: the runtime that performs its state machine (`LeaseMachine`), sync and async.

`LeaseBase` holds what both runtimes share: every input goes to the lease's `LeaseMachine`
under one module lock held for a few assignments only (never across a store call, a callback
or telemetry), and its answer is performed in two halves: `_locked` (arm or forget the event,
record the loss) inside the lock, `_then` (abort the signal, tell the hooks) outside it. `Lease`
(here) and `AsyncLease` (`_async.py`) add only the store I/O and where user code runs.

Each lease has one pending event in its `Scheduler`: one heap and one armed timer per clock
(sync: served by the timer thread) or per event loop (async). A new lease's first event waits
among the scheduler's young leases, not in the heap, until the timer next fires: most bodies
end before it, and their lease leaves no entry behind. When the timer fires, the
scheduler feeds `tick` to every lease that is due (renewals due within a few milliseconds are
taken together), declares the losses there and then, and hands the renewals on as batches,
one per store (`_renew_batch`: one store call renews many leases when the store offers
`renew_many`; the answers are settled under one lock hold). Sync batches run on the store's
pool, never on the timer thread; async ones run on the loop (a store that answers at once), as
one task per batch (a store with `renew_many_async`), or as one task per renewal; the latest
deadline in a batch cancels its task.

A loss marks the lease's signal aborted with the lease's `LockLostError` at once, then hands
the signal's callbacks and the loss notification to where the lease's user code runs (sync:
its strand of the callback pool; async: its loop), once per lease.
"""

from __future__ import annotations

import collections
import contextlib
import functools
import heapq
import inspect
import itertools
import logging
import threading
import weakref
from dataclasses import dataclass
from os import urandom as _urandom
from typing import TYPE_CHECKING

from resilience._lease import _workers
from resilience._lease._core import ARM, DISARM, LOSE, RELEASE, RENEW, REPORT, LeaseMachine
from resilience._lease._workers import CALLBACKS, Strand, store_pool
from resilience._runtime._threads import interrupts_caller, on_fork_in_child
from resilience._signal import Signal
from resilience._time import clock_wait, sync_call_later, wait_event
from resilience.exceptions import LockLostError
from resilience.stores._steps import run_steps

if TYPE_CHECKING:
    from collections.abc import Callable, Hashable

    from resilience._lease._core import AcquireSchedule
    from resilience._lease._ops import StoreOps
    from resilience._time import TimeProvider, TimerHandle
    from resilience.stores._steps import Steps

__all__ = [
    "RELEASE_TIMEOUT",
    "Batch",
    "Lease",
    "LeaseBase",
    "LeaseParams",
    "Scheduler",
    "acquire_lease",
    "call_sync_hook",
    "new_owner",
]

_logger = logging.getLogger("resilience")

_LOCK = threading.Lock()
_LIVE: dict[int, LeaseBase] = {}
"""Leases whose body still runs (for `os.fork`): id -> lease."""

_NEVER = float("inf")


_NOTIFY_SLICE = 0.05
"""A sync wait on a store that only offers a blocking `wait_released` checks its signal this often."""

RELEASE_TIMEOUT = 5.0
"""The longest a final release may take before it is abandoned (never longer than the lease's ttl:
by then the lease has expired anyway)."""

BATCH = 512
"""Renewals per store call at most: a larger batch is split, so a pool can run parts side by side."""


def new_owner() -> str:
    """A random owner id, 128 bits, unique to one execution (or one primitive acquisition).

    Each is 16 bytes of `os.urandom` as hex, read `_OWNER_BATCH` at a time: one system call
    serves that many executions. A forked child forgets the parent's unused ones.
    """
    try:
        return _OWNERS.pop()  # atomic: two threads never get the same one
    except IndexError:
        raw = _urandom(16 * _OWNER_BATCH).hex()
        _OWNERS.extend([raw[n : n + 32] for n in range(32, len(raw), 32)])
        return raw[:32]


_OWNERS: collections.deque[str] = collections.deque()
_OWNER_BATCH = 64


class Scheduler:
    """The pending events of every lease on one clock (sync) or one loop (async): one heap, one timer.

    Arming a lease's event is a heap push under the lease lock; the timer is re-armed only when
    the new event is the earliest. A new lease's first event is no push: the lease waits in
    `young` (an ending lease leaves it in O(1), in any order), and the timer is re-armed when
    its event is the earliest. When it fires, the young leases still armed move into the heap,
    everything due is popped and the leases' machines decide; after the lock, the losses are
    announced and the renewals go out in batches of one store (`dispatch(batches)`). A batch
    in flight is watched by one entry at its earliest deadline (`Batch`), standing for each of
    its leases' deadline events: a renewal that hangs is still bounded by the lease's time
    left. An entry whose lease re-armed or ended since is dropped lazily; the heap is
    compacted when those outnumber the live ones.
    """

    __slots__ = ("_armed_at", "_call_later", "_dispatch", "_heap", "_seq", "_timer", "_tp", "stale", "young")

    def __init__(
        self,
        time_provider: TimeProvider,
        call_later: Callable[[float, Callable[[], object]], TimerHandle],
        dispatch: Callable[[list[Batch]], None],
    ) -> None:
        self._tp = time_provider
        self._call_later = call_later
        self._dispatch = dispatch
        self._heap: list[tuple[float, int, float, LeaseBase | Batch]] = []
        self._seq = itertools.count()
        self._timer: TimerHandle | None = None
        self._armed_at = _NEVER
        self.stale = 0
        self.young: dict[int, LeaseBase] = {}

    def push(self, lease: LeaseBase) -> None:
        """Arm `lease`'s event at its machine's `armed_at` (under _LOCK)."""
        machine = lease._machine
        lease._queued = machine.armed_at
        self._push(machine.armed_at, machine.early_at, lease)

    def adopt(self, lease: LeaseBase) -> None:
        """Arm a new `lease`'s first event (under _LOCK): among the young, with the timer armed in time."""
        when = lease._machine.armed_at
        if when < self._armed_at:
            self._arm(when)  # first: if it raised, the lease would not be young
        self.young[id(lease)] = lease

    def _push(self, when: float, early: float, item: LeaseBase | Batch) -> None:
        heap = self._heap
        if self.stale > _COMPACT_AT and self.stale * 2 > len(heap):
            self._compact()
        heapq.heappush(heap, (when, next(self._seq), early, item))
        if when < self._armed_at:
            self._arm(when)

    def _compact(self) -> None:
        """Drop the entries of leases that re-armed or ended since (they outnumber the live ones)."""
        heap = self._heap
        heap[:] = [entry for entry in heap if type(entry[3]) is Batch or entry[3]._machine.armed_at == entry[0]]  # type: ignore[union-attr]
        heapq.heapify(heap)
        self.stale = 0

    def _arm(self, when: float) -> None:
        # The new timer first: if scheduling raised, the old one would still stand for `_armed_at`.
        timer = self._call_later(when - self._tp.monotonic(), self.fire)
        if self._timer is not None:
            self._timer.cancel()
        self._timer = timer
        self._armed_at = when

    def fire(self) -> None:
        """The timer fired: tick every lease that is due (or may go early), then dispatch."""
        with _LOCK:
            self._timer = None
            self._armed_at = -_NEVER  # re-armed once, below, not by each push
            try:
                young, self.young = self.young, {}
                for lease in young.values():
                    self.push(lease)
                lost, renewals = self._take_due(self._tp.monotonic())
                batches = by_store(renewals)
                for batch in batches:
                    deadline = min(lease._machine.deadline for lease in batch.leases)
                    self._push(deadline, deadline, batch)
            finally:  # whatever happened, the next event is armed: the heap is never orphaned
                self._armed_at = _NEVER
                if self._heap:
                    self._arm(self._heap[0][0])
        for lease in lost:
            lease._then(LOSE)
        if batches:
            self._dispatch(batches)

    def _take_due(self, now: float) -> tuple[list[LeaseBase], list[LeaseBase]]:
        """Pop and tick what is due (under _LOCK): the leases lost, and those to renew."""
        lost: list[LeaseBase] = []
        renewals: list[LeaseBase] = []
        heap = self._heap
        while heap and heap[0][2] <= now:
            when, _, _, item = heapq.heappop(heap)
            if type(item) is Batch:
                due = item.due(now, self)
            else:
                assert isinstance(item, LeaseBase)
                if item._machine.armed_at != when:
                    if self.stale:
                        self.stale -= 1
                    continue
                item._queued = _NEVER
                due = [item]
            for lease in due:
                flags = lease._machine.tick(now)
                if flags & RENEW:
                    renewals.append(lease)  # its deadline is watched by its batch's entry
                    flags &= ~ARM
                if lease._locked(flags) & LOSE:
                    lost.append(lease)
        return lost, renewals


class Batch:
    """Renewals of one store (and renewal group) sent together, and the one heap entry that watches their deadlines."""

    __slots__ = ("group", "leases")

    def __init__(self, leases: list[LeaseBase], group: Hashable = None) -> None:
        self.leases = leases
        self.group = group

    def due(self, now: float, scheduler: Scheduler) -> list[LeaseBase]:
        """The batch's entry fired (under _LOCK): its leases whose event is due now.

        Each lease whose next event has no heap entry of its own (its answer came back, but an
        earlier event, this one, was armed; or it is still in flight) gets it now, or is due.
        """
        due = []
        for lease in self.leases:
            machine = lease._machine
            if machine.armed_at in (lease._queued, _NEVER):
                continue  # it has its own entry, or has ended
            if machine.early_at <= now:
                due.append(lease)
            else:
                scheduler.push(lease)
        return due

    def start(self) -> tuple[float, list[int], list[tuple[str, str, float]]]:
        """The send time, the positions of the leases to send, and their `renew_many` items.

        A lease already past its deadline is not sent (it is lost).
        """
        leases = self.leases
        sent = leases[0]._tp.monotonic()
        todo = [n for n, lease in enumerate(leases) if sent < lease._machine.deadline]
        return sent, todo, [(leases[n].store_key, leases[n].owner, leases[n]._machine.renew_ttl) for n in todo]

    def answered(self, sent: float, todo: list[int], got: list[bool | Exception]) -> None:
        """Settle the answers `got` for the leases at `todo` (the others were not sent: False)."""
        leases = self.leases
        answers: list[bool | Exception] = [False] * len(leases)
        for n, answer in zip(todo, got, strict=True):
            answers[n] = answer
        with _LOCK:  # every answer fed to its lease's machine under one lock hold
            now = leases[0]._tp.monotonic()
            outcomes = [
                lease._locked(
                    lease._machine.renew_failed(now)
                    if isinstance(answer, Exception)
                    else lease._machine.renew_answered(sent, now, answer)
                )
                for lease, answer in zip(leases, answers, strict=True)
            ]
        for lease, flags, answer in zip(leases, outcomes, answers, strict=True):
            if flags & (LOSE | REPORT):
                lease._then(flags, failure=answer if isinstance(answer, Exception) else None)

    def run(self) -> None:
        """Renew every lease in one store call, and settle the answers under one lock hold.

        A store error is each lease's.
        """
        sent, todo, items = self.start()
        self.answered(sent, todo, self.leases[0]._ops.renew_many(items) if todo else [])


_COMPACT_AT = 1024


def by_store(leases: list[LeaseBase]) -> list[Batch]:
    """`leases` in batches of at most `BATCH`, each on one store and in one renewal group."""
    if not leases:
        return []
    ops = leases[0]._ops
    store = ops.store
    if ops.group is None and all(lease._ops.store is store for lease in leases):  # the common case: one store
        return [Batch(leases[n : n + BATCH]) for n in range(0, len(leases), BATCH)]
    groups: dict[tuple[int, Hashable], list[LeaseBase]] = {}
    for lease in leases:
        groups.setdefault((id(lease._ops.store), _group(lease)), []).append(lease)
    return [
        Batch(group[n : n + BATCH], where[1]) for where, group in groups.items() for n in range(0, len(group), BATCH)
    ]


def _group(lease: LeaseBase) -> Hashable:
    """The renewal group of `lease`'s key (None when its store has one, or cannot tell now)."""
    group = lease._ops.group
    if group is None:
        return None
    try:
        return group(lease.store_key)
    except Exception:  # noqa: BLE001 - a store that cannot tell (a Cluster without this slot): one group
        return None


_SCHEDULERS: weakref.WeakKeyDictionary[TimeProvider, Scheduler] = weakref.WeakKeyDictionary()
_STRONG_SCHEDULERS: dict[int, tuple[TimeProvider, Scheduler]] = {}


def _dispatch_sync(batches: list[Batch]) -> None:
    """On the timer thread: renewals go to the store's pool.

    A batch on an in-process store that renews many at once (the memory stores: a few dict
    updates under their lock, never user code) is renewed right here: no hop to another thread.
    """
    for batch in batches:
        ops = batch.leases[0]._ops
        if ops.renews_on_timer:
            batch.run()
        else:
            store_pool(ops.pool_owner, batch.group).submit(batch.run)


def scheduler_for(time_provider: TimeProvider) -> Scheduler:
    """The one sync `Scheduler` of a clock (weakly keyed; kept for the process if it cannot be)."""
    entry = _STRONG_SCHEDULERS.get(id(time_provider))
    if entry is not None:
        return entry[1]

    def new() -> Scheduler:
        return Scheduler(time_provider, functools.partial(sync_call_later, time_provider), _dispatch_sync)

    # Made under the lock when missing; one made by another thread meanwhile wins (ours, never armed, is dropped).
    try:
        scheduler = _SCHEDULERS.get(time_provider)
        if scheduler is None:
            with _LOCK:
                scheduler = _SCHEDULERS.setdefault(time_provider, new())
    except TypeError:  # the system clock and other slotted clocks cannot be weakly referenced
        with _LOCK:
            scheduler = _STRONG_SCHEDULERS.setdefault(id(time_provider), (time_provider, new()))[1]
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
    """What the sync and async leases share: the machine's inputs and their outcome."""

    __slots__ = (
        "_error",
        "_generation",
        "_loss",
        "_machine",
        "_ops",
        "_params",
        "_queued",
        "_scheduler",
        "_strand",
        "_teller",
        "_told",
        "_tp",
        "acquired_at",
        "key",
        "owner",
        "signal",
        "store_key",
        "tag",
        "token",
    )

    def __init__(
        self,
        ops: StoreOps,
        key: str,
        store_key: str,
        grant: tuple[str, int, float, object],
        *,
        params: LeaseParams,
        time_provider: TimeProvider,
        parent: Signal | None,
    ) -> None:
        """Start watching the lease the store granted: `grant` is (owner, token, the acquire's send time, tag).

        `key` is the key as the caller named it (its errors carry it), `store_key` the one the
        store holds (`ops.prefix + key`). Granted while `parent` aborted (the acquire raced the
        caller's cancellation), the lease is given back at once (`_abandon`) and the signal's
        reason raised.
        """
        self.owner, self.token, sent, tag = grant
        self._ops = ops
        self.key = key
        self.store_key = store_key
        self._tp = time_provider
        if parent is not None and parent._reason is not None:
            self._abandon()
            raise parent._reason
        self.tag = tag
        """The caller's own per-lease state (the hooks get the lease, and so the tag)."""
        self._params = params
        self.signal: Signal = Signal() if parent is None else parent.child()
        self._loss: Signal | None = None
        self._machine = LeaseMachine(params.ttl, params.renew_interval, watch=params.watch_deadline)
        self._scheduler = self._bind(time_provider)
        self._queued = _NEVER  # when its own heap entry is (a batch's entry may stand for it)
        self._error: LockLostError | None = None
        # Set once the loss's callbacks (signal, `on_lost`) have run; created with the loss record,
        # together with the thread that owes their hand-on (`_then`).
        self._told: threading.Event | None = None
        self._teller: threading.Thread | None = None
        # The sync runtime's callback strand, made by the first callback (`Lease._callbacks`).
        self._strand: Strand | None = None
        self._generation = _workers.fork_generation
        self.acquired_at = now = time_provider.monotonic()
        try:
            with _LOCK:
                _LIVE[id(self)] = self
                if self._machine.acquired(sent, now) & ARM:
                    self._scheduler.adopt(self)
        except BaseException:  # its event could not be armed (a thread that would not start)
            with _LOCK:
                _LIVE.pop(id(self), None)
                self._machine.ended = True
            self.signal.detach()
            self._abandon()
            raise

    def _bind(self, time_provider: TimeProvider) -> Scheduler:
        """Bind the lease to the runtime that runs it (the sync one, or the running loop): its scheduler."""
        raise NotImplementedError

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
    def ttl(self) -> float:
        """The current lease length (the last `extend` may have changed it)."""
        return self._machine.ttl

    def expires_in(self) -> float:
        """Seconds left until the local deadline (0 when passed)."""
        return max(0.0, self._machine.deadline - self._tp.monotonic())

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
        return self._generation != _workers.fork_generation

    # -- the machine's inputs, performed ------------------------------------------------------

    def _locked(self, flags: int) -> int:
        """Perform the state half of `flags` (under _LOCK): the event, the loss record."""
        scheduler = self._scheduler
        if flags & DISARM and scheduler.young.pop(id(self), None) is None:
            scheduler.stale += 1  # its heap entry is left behind
        if flags & ARM:  # its new event; a young lease (`extend`) leaves the young for the heap
            scheduler.young.pop(id(self), None)
            scheduler.push(self)
        if flags & (LOSE | RELEASE):
            _LIVE.pop(id(self), None)
            if flags & LOSE:
                self._error = self._params.error_type(self.key, self.token)
                self._told = threading.Event()
                self._teller = threading.current_thread()
        return flags

    def _then(self, flags: int, *, inline: bool = False, failure: Exception | None = None) -> None:
        """Perform the user-facing half of `flags` (never under _LOCK).

        On a loss the signal(s) read as aborted at once; their callbacks run at once when
        `inline` (the holder's own thread: `extend`, `finish`), else where this lease's user
        code runs (`_deliver`), so that user code never delays another lease.
        """
        params = self._params
        if flags & LOSE:
            error = self._error
            assert error is not None
            try:
                runs = [self.signal.abort_deferred(error)]
                if self._loss is not None:  # its callbacks run first
                    runs.insert(0, self._loss.abort_deferred(error))
                for run in runs:
                    if run is not None and inline:
                        run()
                    elif run is not None:
                        self._deliver(run)
                if params.on_lost is not None:
                    self._call_hook(params.on_lost, self)
                self._loss_told()
            except BaseException:
                assert self._told is not None
                self._told.set()  # the hand-on was cut short: a finishing holder must not wait for it
                raise
        if flags & REPORT and failure is not None and params.on_renew_error is not None:
            self._call_hook(params.on_renew_error, self, failure)

    def _input(self, decide: Callable[[LeaseMachine, float], int]) -> int:
        """Feed one input (`decide(machine, now)`) made on the holder's own thread; perform it."""
        with _LOCK:
            flags = self._locked(decide(self._machine, self._tp.monotonic()))
        if flags & LOSE:
            self._then(flags, inline=True)  # REPORT comes only with a renewal's failure (`Batch.answered`)
        return flags

    def _extending(self, ttl: float | None, renew: Callable[[str, str, float], object]) -> Steps[bool]:
        """`extend(ttl)` as steps: one, the store's `renew(key, owner, ttl)` (sync or async).

        False at once when nothing is held (ended, lost, or inherited by a forked child).
        """
        machine = self._machine
        if self._forked() or machine.ended or machine.lost:
            return False
        ttl = machine.ttl if ttl is None else ttl
        sent = self._tp.monotonic()
        ok = bool((yield renew(self.store_key, self.owner, ttl)))
        self._input(lambda machine, now: machine.extend_answered(sent, now, ttl, ok))
        return ok and self._error is None

    def _holder_releases(self) -> bool:
        """The holder's own `release()`: whether to send it (renewal and the watch stop first)."""
        return not self._forked() and bool(self._input(lambda machine, _now: machine.holder_released()) & RELEASE)

    def _ending(self) -> bool:
        """The body ended: stop, check the deadline once more; whether to send the final release."""
        with _LOCK:  # `_input(LeaseMachine.body_ended)`, inline: once per lease
            flags = self._locked(self._machine.body_ended(self._tp.monotonic()))
        if flags & LOSE:
            self._then(flags, inline=True)
        return bool(flags & RELEASE) and self._generation == _workers.fork_generation

    def _detach(self) -> LockLostError | None:
        self.signal.detach()
        return self._error

    # -- what differs between the runtimes ----------------------------------------------------

    def _abandon(self) -> None:
        """Give back a lease granted while the caller's signal aborted (best effort)."""
        raise NotImplementedError

    def _deliver(self, run: Callable[[], None]) -> None:
        """Run signal callbacks (`run()`) where user code of this lease runs."""
        raise NotImplementedError

    def _call_hook(self, hook: Callable[..., object], *args: object) -> None:
        """Run `hook(*args)` where user code of this lease runs, after its earlier callbacks.

        Exceptions are logged; an awaitable is awaited in async.
        """
        raise NotImplementedError

    def _loss_told(self) -> None:
        """Set `_told` once the loss's callbacks, handed on just before, have run."""
        raise NotImplementedError

    def _abandon_in_child(self) -> None:  # pragma: no cover - runs in a forked child (test_lock_fork.py)
        # After os.fork(), in the child: the parent still holds (and renews) this lease.
        self._machine.ended = True
        if self._error is None:
            self._error = self._params.error_type(self.key, self.token)
        with contextlib.suppress(Exception):
            if self._loss is not None:
                self._loss.abort(self._error)
            self.signal.abort(self._error)

    def __repr__(self) -> str:
        state = "lost" if self._error is not None else "ended" if self._machine.ended else "held"
        return f"<{type(self).__name__} key={self.key!r} token={self.token} {state}>"


def call_sync_hook(what: str, hook: Callable[..., object], *args: object) -> None:
    """`hook(*args)` from sync code: its exception is logged (an interrupt propagates), an awaitable closed.

    `what` names the hook in the log records ("on_lock_lost raised").
    """
    try:
        result = hook(*args)
    except BaseException as error:
        if interrupts_caller(error):
            raise
        _logger.exception("%s raised", what)
        return
    if inspect.isawaitable(result):
        close = getattr(result, "close", None)
        if callable(close):
            close()
        _logger.error("%s returned an awaitable in a sync execution; it was not awaited", what)


class Lease(LeaseBase):
    """A lease held by sync code: its event in its clock's scheduler, renewals on the store's pool.

    Its callbacks run in order on its own strand of the callback pool (`_workers`).
    """

    __slots__ = ()

    _bind = staticmethod(scheduler_for)  # the function itself: one call per lease, not two

    def _abandon(self) -> None:
        _release_quietly(self._ops, self.store_key, self.owner)  # the store just answered: no reason to wait

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
        self._callbacks().submit(lambda: call_sync_hook("a lease callback", hook, *args))

    def _loss_told(self) -> None:
        told = self._told
        if told is not None:
            self._callbacks().submit(told.set)  # the strand runs its jobs in order: after the hook

    def _wait_loss_told(self) -> None:
        """A loss known now has had its callbacks run before the holder returns (a process may exit right after).

        The holder runs what its strand still queues itself (never waiting for a pool thread);
        a callback already running elsewhere is waited for. The thread that recorded the loss
        hands its callbacks on right after: the holder waits for that while the thread lives.
        When the holder recorded it itself, the hand-on ran (or was interrupted) before now.
        """
        told = self._told
        if told is None or self._forked():
            return
        teller = self._teller
        strand = self._callbacks()
        while True:
            strand.join()  # after it, every job submitted before has run
            if told.is_set() or teller is threading.current_thread() or teller is None or not teller.is_alive():
                return  # told, or the hand-on was cut short (an interrupt) and never comes
            told.wait(0.001)

    def extend(self, ttl: float | None = None) -> bool:
        """Push the lease out to now + `ttl` (default: the lease's ttl); False if it is gone.

        False also aborts the signal (the lease is lost). Store errors propagate.
        """
        return run_steps(self._extending(ttl, self._ops.store.renew))

    def release(self) -> bool:
        """Stop renewal and free the key if this owner still holds it (True only then).

        Called by the holder itself (a primitive handle); the final `finish` then sends no
        second release. Store errors propagate.
        """
        return self._holder_releases() and bool(self._ops.store.release(self.store_key, self.owner))

    def finish(self) -> LockLostError | None:
        """End the lease when the body ends; the loss error, if the lease was lost.

        Stops renewal (a renewal in flight is ignored), checks the deadline again, sends
        exactly one release (ignoring its errors; False means lost; abandoned after
        `min(RELEASE_TIMEOUT, ttl)`), runs what is left of a loss's callbacks, and detaches
        the signal.
        """
        if self._ending():
            # An in-process store answers at once, here.
            released = _release_quietly(self._ops, self.store_key, self.owner) if self._ops.inline else self._release()
            if not released:  # someone else holds the key: lost (True changes nothing)
                self._input(lambda machine, _now: machine.release_answered(ok=False))
        if self._told is not None:  # a loss was recorded: its callbacks run before the holder returns
            self._wait_loss_told()
        return self._detach()

    def _release(self) -> bool:
        """The final release, abandoned after `min(RELEASE_TIMEOUT, ttl)` seconds on the lease's clock (then True).

        It runs on the pool of the key's renewal group while the holder waits for its answer or the
        bound: a store that never answers (a silent connection, a client without socket timeout, a
        stopped Cluster master) keeps the call, never the holder, nor the releases served by another
        master. (An in-process store answers at once: `finish` releases it itself.)
        """
        done = threading.Event()
        answer = [True]

        def release() -> None:
            answer[0] = _release_quietly(self._ops, self.store_key, self.owner)
            done.set()

        store_pool(self._ops.pool_owner, _group(self)).submit(release, urgent=True)
        wait_event(self._tp, done, min(RELEASE_TIMEOUT, self._machine.ttl))
        return answer[0]


class _Wake(threading.Event):
    """What a sync waiter sleeps on: set by a release (`released`), its timer or its signal."""

    released = False

    def on_release(self) -> None:
        self.released = True
        self.set()


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
    granted the lease but the reply was lost. On a store that queues waiters (`ops.fair`), a
    caller that will wait joins the queue and sleeps until its turn; one that gives up (or is
    interrupted) leaves it with that same release.
    """
    owner = owner or new_owner()
    named, key = key, ops.prefix + key  # the lease reports `named`; the store holds `key`
    queued = ops.fair and schedule is not None
    # A queued waiter listens for its turn during its whole acquire, from before its first
    # attempt (see `_wait_turn`): a turn announced between a refused attempt and the wait is
    # never missed. On Redis that costs no round trip: the listener's SUBSCRIBE is sent on its
    # own connection without waiting for the reply, and only for a key not already subscribed.
    wake = _Wake() if queued and ops.listen is not None else None
    stop_listening = None if wake is None or ops.listen is None else ops.listen(key, wake.on_release, owner)
    try:
        while True:
            if signal is not None and signal._reason is not None:
                raise signal._reason
            if wake is not None:  # a turn announced from now on wakes the next wait
                wake.released = False
                wake.clear()
            sent = time_provider.monotonic()
            try:  # interrupted, the attempt releases in the background (the store may have granted it)
                token, held_for = ops.queue(key, owner, params.ttl) if queued else ops.acquire(key, owner, params.ttl)
            except BaseException:
                _release_in_background(ops, key, owner)
                raise
            if token is not None:
                grant = (owner, token, sent, tag)
                return Lease(ops, named, key, grant, params=params, time_provider=time_provider, parent=signal), None
            if schedule is None or (wait := schedule.next_wait(time_provider.monotonic(), held_for)) is None:
                if queued:
                    _release_quietly(ops, key, owner)  # leave the queue: the turn passes on
                return None, held_for
            _wait_turn(ops, key, wait, schedule, time_provider=time_provider, signal=signal, owner=owner, wake=wake)
    finally:
        if stop_listening is not None:
            stop_listening()


def _wait_turn(
    ops: StoreOps,
    key: str,
    wait: float,
    schedule: AcquireSchedule,
    *,
    time_provider: TimeProvider,
    signal: Signal | None,
    owner: str,
    wake: _Wake | None,
) -> None:
    """Wait up to `wait` before the next attempt, woken early by a release or the signal (then raise its reason).

    Tells `schedule` when a release ended the wait. A queued waiter (`ops.fair`) passes the
    `wake` its listener was registered with for the whole acquire, so that a turn announced
    between its refused attempt and this wait is not missed; interrupted, it leaves the queue
    in the background.
    """
    signal = signal or Signal()
    try:
        if ops.listen is None and ops.notify:
            end = time_provider.monotonic() + wait
            released = False
            while not released and not signal.aborted and (left := end - time_provider.monotonic()) > 0:
                released = ops.wait_released(key, min(left, _NOTIFY_SLICE), owner)
        else:
            woken = wake or _Wake()
            remove_signal = signal.add_wakeup(lambda _reason: woken.set())
            remove_listener = None if ops.listen is None or wake is not None else ops.listen(key, woken.on_release)
            try:
                clock_wait(time_provider, woken, wait)
            finally:
                remove_signal()
                if remove_listener is not None:
                    remove_listener()
            released = woken.released
        signal.raise_if_aborted()
    except BaseException:
        if ops.fair:
            _release_in_background(ops, key, owner)
        raise
    if released:
        schedule.woken(time_provider.monotonic())


def _release_quietly(ops: StoreOps, key: str, owner: str) -> bool:
    """The store's release; an error counts as released (logged): the lease expires anyway."""
    try:
        return bool(ops.store.release(key, owner))
    except Exception:
        _logger.debug("a lease release failed", exc_info=True)
        return True


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
    _OWNERS.clear()  # the parent may use them still: the child's owner ids are its own
    _SCHEDULERS.clear()  # their timers died with the parent's threads
    _STRONG_SCHEDULERS.clear()
    leases = list(_LIVE.values())
    _LIVE.clear()
    for lease in leases:
        lease._abandon_in_child()


on_fork_in_child(_after_fork_in_child)
