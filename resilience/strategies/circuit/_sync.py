"""The background synchronisation of shared circuits: never a Redis call on a call's path.

`SharedCircuitController` is the controller of a `SharedCircuitCore`: its hot path only
counts (under the same lock as a local circuit); commands (a probe claim, a probe's outcome, a
manual move) wake the sync at once. `CircuitSync` performs one exchange with the store for
one circuit and applies the answer; it is run

- with a sync client, by one `SyncWorker` thread per store, shared by every circuit of that
  store (a heap of due times, like the timer thread), its exchanges guarded by one watchdog on
  the shared timer thread: while one exchange has not answered, every circuit of the store
  whose `stall_after` has passed goes on local state (the others wait behind it), although
  the worker is still waiting for the reply;
- with only an asyncio client, by one task per circuit on the loop of its async executions,
  each exchange under `asyncio.timeout(stall_after)`; the first call on a loop waits for that
  task's first exchange (one loop per call, as `asyncio.run()` per job, syncs at every call).

The store being unreachable emits `OnCircuitStateSyncFailed` (Warning) once per outage, puts
the circuit on local decisions (opening at once if what it counted meanwhile meets its rule),
and retries with a backoff up to `_MAX_BACKOFF`; the first answer after that hands the
decisions back to the fleet. A circuit is built only once its first exchange has answered or
failed (waiting at most `_FIRST_EXCHANGE`), so that a new process never calls through an open
circuit.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import threading
import time
import weakref
from dataclasses import dataclass
from typing import TYPE_CHECKING

from resilience._context import new_context
from resilience._lease._workers import off_timer_thread
from resilience._outcome import Err
from resilience._runtime._threads import on_fork_in_child, start_thread
from resilience._runtime._timers import TIMER_THREAD
from resilience.strategies.circuit._controller import CircuitBreakerManualControl, CircuitController
from resilience.strategies.circuit._core import CircuitState, Transition
from resilience.strategies.circuit._fleet import Command, SharedCircuitCore, StateCode
from resilience.telemetry._event import Severity

if TYPE_CHECKING:
    from resilience._runtime._timers import ThreadTimerHandle
    from resilience.stores._redis_circuit import CircuitExchange, CircuitReply, RedisCircuitStateStore
    from resilience.strategies._base import StrategyBuildContext

__all__ = ["CircuitSync", "OnCircuitStateSyncFailedArguments", "SharedCircuitController"]

_MAX_BACKOFF = 2.0
"""The longest wait between two attempts while the store is unreachable (seconds)."""
_FIRST_EXCHANGE = 2.0
"""The longest a `build()` waits for a shared circuit's first exchange (seconds)."""


@dataclass(frozen=True, slots=True)
class OnCircuitStateSyncFailedArguments:
    """What the `OnCircuitStateSyncFailed` event carries: the circuit and why it runs on local state."""

    circuit_key: str
    error: Exception
    """The store's error (a `TimeoutError` when it did not answer in time)."""


class SharedCircuitController(CircuitController):
    """The controller of a circuit shared through a store: counts locally, wakes the sync on commands."""

    __slots__ = ("sync",)

    core: SharedCircuitCore
    sync: CircuitSync

    def admit(self) -> tuple[int, Transition | None]:
        """Admit a call; a rejection after the break asks the fleet for the probe."""
        now = self._time.monotonic()
        core = self.core
        with self.lock:
            wanted = core.probe_wanted
            try:
                return core.admit(now)
            finally:
                if core.probe_wanted and not wanted:
                    self.sync.wake()

    def record(self, ticket: int, *, handled: bool) -> Transition | None:
        """Count an outcome (a command it queues, such as a probe's outcome, goes to the fleet at once)."""
        now = self._time.monotonic()
        core = self.core
        with self.lock:
            queued = len(core.outbox)
            transition = core.record(now, ticket, handled=handled)  # no generator: refused with a store
            urgent = len(core.outbox) > queued
        if urgent:
            self.sync.wake()
        return transition

    def move(self, *, isolate: bool) -> Transition | None:
        """Isolate or close by hand, here at once and for the fleet at the next (immediate) sync."""
        transition = super().move(isolate=isolate)
        self.sync.wake()
        return transition


class CircuitSync:
    """One circuit's exchanges with the store: what to send, and what the answer changes."""

    __slots__ = (
        "__weakref__",
        "_closed",
        "_control",
        "_failing",
        "_ready",
        "_ref",
        "_store",
        "_task",
        "_worker",
        "due",
        "heard",
        "interval",
        "key",
        "stall_after",
        "stalled_for",
    )

    def __init__(
        self, store: RedisCircuitStateStore, key: str, interval: float, control: CircuitBreakerManualControl | None
    ) -> None:
        self._store = store
        self.key = key
        self.interval = interval
        self._control = control  # follows the manual moves the fleet makes elsewhere
        self.stall_after = max(1.0, 10 * interval)
        """How long an exchange may take before the circuit goes on local state meanwhile."""
        self._failing = 0  # failed exchanges in a row
        self.heard = threading.Event()
        """Set once the store answered, or the first exchange failed."""
        self.stalled_for = 0.0  # the start of the hung exchange this circuit went local for
        self.due = 0.0
        self._task: asyncio.Task[None] | None = None
        self._ready: asyncio.Event | None = None  # set once the task answered or failed once
        self._worker = _worker_of(store) if store.has_sync_client else None
        self._closed = False

    def start(self, controller: SharedCircuitController, context: StrategyBuildContext) -> None:
        """Sync `controller`'s circuit until the pipeline closes.

        With a sync client, `build()` waits (a bounded time) for the first exchange.
        """
        controller.sync = self
        # Weakly: the controller holds this sync, and a cycle would keep a dropped pipeline
        # syncing until the next full garbage collection.
        self._ref = weakref.ref(controller)
        context.on_close(self.close)
        if self._worker is not None:
            self._worker.schedule(self, 0.0)
            # The first exchange before the first call; `build()` waits for it a bounded time only
            # (a long sync_interval must not make a build, maybe on an event loop, wait for long).
            if not self.heard.wait(min(self.stall_after + 2 * self.interval, _FIRST_EXCHANGE)):
                self.stalled()

    def close(self) -> None:
        """The pipeline closed: no exchange from now on; the store's thread ends with its last circuit."""
        self._closed = True
        task = self._task
        if task is not None and not task.done():
            with contextlib.suppress(RuntimeError):  # its loop is closed: the task is gone with it
                task.get_loop().call_soon_threadsafe(task.cancel)
        if self._worker is not None:
            self._worker.notify()

    # -- scheduling ------------------------------------------------------------------------------

    def wake(self) -> None:
        """Exchange as soon as possible (a command is waiting)."""
        if self._worker is not None and not self._closed:
            self._worker.schedule(self, 0.0)
        # An asyncio sync looks at the outbox when it wakes: at most one interval later.

    def next_delay(self) -> float:
        """Seconds until the next exchange: the interval, or a backoff while failing."""
        if self._failing:
            return float(min(_MAX_BACKOFF, self.interval * 2 ** min(self._failing, 10)))
        return self.interval

    # -- one exchange ----------------------------------------------------------------------------

    @property
    def alive(self) -> bool:
        """Whether the circuit still syncs (its pipeline was neither dropped nor closed)."""
        return not self._closed and self._ref() is not None

    def _prepare(self) -> CircuitExchange | None:
        from resilience.stores._redis_circuit import CircuitExchange

        controller = self._ref()
        if controller is None:
            return None
        core = controller.core
        now = controller._time.monotonic()
        with controller.lock:
            successes, failures, command, command_epoch, remaining = core.take_batch(now, self.interval)
            state, left = core.known(now)
            epoch = core.remote_epoch
        return CircuitExchange(
            successes,
            failures,
            *core.rule,
            core.break_duration,
            command,
            command_epoch,
            epoch,
            state,
            remaining if command is Command.OPEN else left,
            self.interval,
        )

    def answered(self, reply: CircuitReply) -> None:
        """Apply the fleet's state (the store answered)."""
        controller = self._ref()
        if controller is None:
            return
        core = controller.core
        now = controller._time.monotonic()
        with controller.lock:
            core.go_shared()  # after an outage: the fleet decides again
            self._failing = 0
            transition = core.apply(
                now,
                StateCode(reply.state),
                reply.epoch,
                reply.remaining,
                manual=reply.manual,
                granted=reply.granted,
                wait=reply.wait,
            )
            again = bool(core.outbox)
        self.heard.set()  # once applied: a `build()` waiting for it lets no call past an open fleet
        if transition is not None:
            self._report_remote(controller, transition)
        if again:
            self.wake()

    def failed(self, error: Exception | None) -> None:
        """Put the circuit on local state: the store failed with `error` (said once per outage), or closed (None)."""
        controller = self._ref()
        if controller is None:
            return
        now = controller._time.monotonic()
        with controller.lock:
            first = self._failing == 0 and controller.core.shared
            if error is not None:
                self._failing += 1
            transition = controller.core.go_local(now)
        self.heard.set()
        if error is not None and first:
            arguments = OnCircuitStateSyncFailedArguments(self.key, error)
            controller._telemetry.emit(
                "OnCircuitStateSyncFailed", Severity.WARNING, outcome=Err(error), arguments=arguments
            )
        if transition is not None:
            self._report_remote(controller, transition)

    def _report_remote(self, controller: CircuitController, transition: Transition) -> None:
        """The event of a transition learned from the fleet (no execution runs: no callback)."""
        if self._control is not None and transition.is_manual:
            self._control._follow(isolated=transition.state is CircuitState.ISOLATED)
        controller.announce(transition, new_context())  # the fleet's transitions know their break

    def stalled(self) -> None:
        """The store has not answered within `stall_after`: go on local state meanwhile."""
        self.failed(TimeoutError(f"the circuit state store did not answer within {self.stall_after:g}s"))

    def run_once(self) -> None:
        """One exchange through the sync client (on the worker thread, under its watchdog)."""
        exchange = self._prepare()
        if exchange is None:
            return
        try:
            reply = self._store.exchange(self.key, exchange)
        except Exception as exc:  # noqa: BLE001 - any store error means "unreachable"; calls go on
            self.failed(exc)
        else:
            self.answered(reply)

    async def run_once_async(self) -> None:
        """One exchange through the asyncio client."""
        exchange = self._prepare()
        if exchange is None:
            return
        try:
            async with asyncio.timeout(self.stall_after):
                reply = await self._store.exchange_async(self.key, exchange)
        except Exception as exc:
            task = asyncio.current_task()
            if task is not None and task.cancelling():  # a cancellation the client turned into an error
                raise asyncio.CancelledError from exc
            self.failed(exc)
        else:
            self.answered(reply)

    # -- asyncio-only stores ---------------------------------------------------------------------

    async def first_exchange(self) -> None:
        """Start this circuit's sync task on the running loop if it has none there, and wait for its first exchange.

        The wait is bounded, and skipped while the store is failing. The task sets `_ready` once
        its first exchange answered or failed.
        """
        task, ready = self._task, self._ready
        loop = asyncio.get_running_loop()
        if task is None or task.done() or task.get_loop() is not loop:
            if self._closed:  # its pipeline closed: no sync starts again
                return
            if self._store.closed:  # this circuit decides alone from now on
                self.failed(None)
                return
            self._ready = ready = asyncio.Event()
            self._task = loop.create_task(
                _serve_async(weakref.ref(self), ready), name=f"resilience-circuit-sync-{self.key}"
            )
            self._store._tasks.add(self._task)
        if ready is not None and not ready.is_set() and not self._failing:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.stall_after + 2 * self.interval):
                    await ready.wait()


async def _serve_async(ref: weakref.ref[CircuitSync], ready: asyncio.Event) -> None:
    """Exchange every interval while the circuit lives (a task holds it weakly).

    Ends when cancelled even if a client swallowed the cancellation (`cancelling()`), and
    closes the client the store made for this loop.
    """
    task = asyncio.current_task()
    sync = ref()
    store = None if sync is None else sync._store
    try:
        while sync is not None and sync.alive:
            if sync._store.closed:  # this circuit decides alone from now on
                sync.failed(None)
                return
            await sync.run_once_async()
            ready.set()
            if task is not None and task.cancelling():
                return
            delay = sync.next_delay()
            del sync
            await asyncio.sleep(delay)
            sync = ref()
    finally:
        ready.set()
        if store is not None:
            await store.release_loop_client()


class SyncWorker:
    """One daemon thread per store running its circuits' exchanges when due (no thread per circuit)."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._cond = threading.Condition()
        self._heap: list[tuple[float, int, weakref.ref[CircuitSync]]] = []
        self._seq = itertools.count()
        self._thread: threading.Thread | None = None
        self._running: CircuitSync | None = None  # the exchange in flight
        self._started = 0.0  # when it started (0.0: none in flight)
        self._watchdog: ThreadTimerHandle | None = None  # armed while an exchange is in flight

    def _arm(self, delay: float | None) -> None:
        """Check for a hung exchange after `delay`; None: no check (under the condition)."""
        if self._watchdog is not None:
            self._watchdog.cancel()
        self._watchdog = None
        if delay is not None:
            # `stalled` emits telemetry (listeners are user code): never on the shared timer thread.
            self._watchdog = TIMER_THREAD.call_later(delay, lambda: off_timer_thread(self._watch))

    def _watch(self) -> None:
        """Every circuit that waited `stall_after` for the exchange in flight goes on local state."""
        now = time.monotonic()
        with self._cond:
            self._watchdog = None
            started = self._started
            if not started:
                return
            stuck = now - started
            # The exchange in flight and every circuit waiting behind it, each once.
            circuits = dict.fromkeys([self._running, *(ref() for _, _, ref in self._heap)])
            due = [sync for sync in circuits if sync is not None and sync.stalled_for != started and sync.alive]
            late = [sync for sync in due if stuck >= sync.stall_after]
            for sync in late:
                sync.stalled_for = started
            # Look again when the next circuit still waiting reaches its `stall_after` (none: no check).
            self._arm(min((sync.stall_after - stuck for sync in due if stuck < sync.stall_after), default=None))
        for sync in late:
            sync.stalled()

    def schedule(self, sync: CircuitSync, delay: float) -> None:
        """Run `sync` after `delay` seconds (sooner wins over a later time already set)."""
        due = time.monotonic() + delay
        with self._cond:
            if sync.due and sync.due <= due and delay > 0:
                return
            sync.due = due
            heapq.heappush(self._heap, (due, next(self._seq), weakref.ref(sync)))
            if self._started and self._watchdog is None:  # a circuit joins the queue behind a hung exchange
                self._arm(max(0.0, sync.stall_after - (time.monotonic() - self._started)))
            if self._thread is None:
                self._thread = start_thread(self._serve, name=self._name)
            self._cond.notify()  # a running thread may be waiting for a later due time

    def notify(self) -> None:
        """Look at the queue again now (a circuit closed: the thread may have nothing left to serve)."""
        with self._cond:
            self._cond.notify()

    def _next(self) -> CircuitSync | None:
        """The next sync when due; None when no circuit is left to serve (the thread ends)."""
        with self._cond:
            while self._heap:
                due, _, ref = self._heap[0]
                sync = ref()
                if sync is None or sync.due != due or not sync.alive:  # gone, or rescheduled since
                    heapq.heappop(self._heap)
                    continue
                wait = due - time.monotonic()
                if wait <= 0:
                    heapq.heappop(self._heap)
                    sync.due = 0.0
                    return sync
                del sync
                self._cond.wait(wait)
            self._thread = None  # a schedule() starts a new one
            return None

    def _serve(self) -> None:
        while (sync := self._next()) is not None:  # None: no circuit left to serve
            if sync._store.closed:
                sync.failed(None)  # decides alone from now on, and is no longer scheduled
            else:
                with self._cond:
                    self._running, self._started = sync, time.monotonic()
                    self._arm(sync.stall_after)
                try:
                    sync.run_once()
                finally:
                    with self._cond:
                        self._running, self._started = None, 0.0
                        self._arm(None)
                self.schedule(sync, sync.next_delay())
            del sync

    def _after_fork_in_child(self) -> None:
        # The thread did not survive the fork (nor its exchange in flight); the circuits did:
        # serve them again.
        self._cond = threading.Condition()
        self._running, self._started, self._watchdog = None, 0.0, None
        self._thread = start_thread(self._serve, name=self._name) if self._heap else None


_WORKERS: weakref.WeakKeyDictionary[RedisCircuitStateStore, SyncWorker] = weakref.WeakKeyDictionary()
_WORKERS_LOCK = threading.Lock()


def _worker_of(store: RedisCircuitStateStore) -> SyncWorker:
    with _WORKERS_LOCK:
        return _WORKERS.setdefault(store, SyncWorker(f"resilience-circuit-sync-{store.prefix}"))


def _after_fork_in_child() -> None:
    with contextlib.suppress(Exception):
        for worker in list(_WORKERS.values()):
            worker._after_fork_in_child()


on_fork_in_child(_after_fork_in_child)
