"""The lock strategy: run the callable only while holding a lease on a key.

The five steps — acquire, run, renew, lose, release — are performed by the lease engine
(`resilience._lease`); this module resolves the key, refuses re-entry, derives the context the
callable runs under (its signal belongs to the lease, `LOCK_TOKEN` is the fencing token),
maps a loss onto the result table of step 4, and emits the events.
"""

from __future__ import annotations

import contextvars
import logging
import threading
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, TypeVar, cast

from resilience._context import LOCK_TOKEN, ResilienceContext
from resilience._lease import (
    HELD_LOCKS,
    BackoffSchedule,
    LeaseParams,
    LockEventArguments,
    LockEvents,
    LockOps,
    SharedLockOps,
    acquire_lease,
    acquire_lease_async,
    call_sync_hook,
)
from resilience._time import lease_clock
from resilience._validation import Problems, to_seconds
from resilience.exceptions import LockLostError, LockNotAcquiredError
from resilience.stores._memory import MemoryLockStore, default_lock_store
from resilience.stores._protocols import AsyncLockStore, AsyncSemaphoreStore, LockStore, SemaphoreStore, serves
from resilience.strategies._common import call_back_async, off_clock, store_traits
from resilience.strategies.lock._key import check_key, check_store_kind, note_default_store, resolve_key

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Iterable

    from resilience._lease import LeaseBase, StoreOps
    from resilience._time import TimeProvider
    from resilience._validation import Duration
    from resilience.strategies._base import StrategyBuildContext

__all__ = ["LockEventArguments", "LockStrategy", "LockStrategyOptions", "OnLockLostArguments", "lock_strategy"]

T = TypeVar("T")

_logger = logging.getLogger("resilience")


@dataclass(frozen=True, slots=True)
class OnLockLostArguments:
    """Passed to `on_lock_lost`: the context the callable runs under, the key and the token."""

    context: ResilienceContext
    key: str
    token: int


@dataclass(frozen=True, slots=True)
class LockStrategyOptions:
    """Options of the lock strategy (see `lock_strategy`); validated at `build()`."""

    key: str | Callable[[ResilienceContext], str]
    ttl: Duration = 30.0
    wait: Duration = 0.0
    store: LockStore | AsyncLockStore | None = None
    on_lock_lost: Callable[[OnLockLostArguments], object] | None = None
    cancel_on_lost: bool = False
    shared: bool = False
    name: str = "Lock"

    def validate(self, context: StrategyBuildContext, /) -> Iterable[str]:
        """Every problem with the options, as `"<option>: <what is wrong>"`."""
        problems = Problems()
        check_key(problems, self.key)
        problems.duration("ttl", self.ttl, minimum=0.001)
        problems.duration("wait", self.wait)
        store: object = self.store
        is_lock = serves(store, LockStore, AsyncLockStore)
        if store is not None and not is_lock:
            if serves(store, SemaphoreStore, AsyncSemaphoreStore):
                problems.add("store", "is a semaphore store: pass a lock store (e.g. MemoryLockStore)")
            else:
                check_store_kind(problems, store)
        elif isinstance(store, MemoryLockStore) and store.time_provider is not context.time_provider:
            problems.add("store", off_clock("MemoryLockStore", "leases expire on its clock"))
        if problems.boolean("shared", self.shared) and self.shared and is_lock and not SharedLockOps.supported(store):
            problems.add(
                "shared",
                f"the store {store!r} cannot hold keys shared (it does not offer SupportsSharedHolds): "
                "use MemoryLockStore, PostgresLockStore or RedisLockStore, or shared=False",
            )
        problems.callable("on_lock_lost", self.on_lock_lost)
        problems.boolean("cancel_on_lost", self.cancel_on_lost)
        problems.name("name", self.name)
        return problems.items

    def create(self, context: StrategyBuildContext, /) -> LockStrategy:
        """A lock strategy for one pipeline."""
        return LockStrategy(self, context)


def lock_strategy(
    key: str | Callable[[ResilienceContext], str],
    /,
    *,
    ttl: Duration = 30.0,
    wait: Duration = 0.0,
    store: LockStore | AsyncLockStore | None = None,
    on_lock_lost: Callable[[OnLockLostArguments], object] | None = None,
    cancel_on_lost: bool = False,
    shared: bool = False,
    name: str = "Lock",
) -> LockStrategyOptions:
    """Options of a lock strategy: run the callable only while holding a lease on `key`.

    Args:
        key: the lock's key (`"nightly-report"`), or a function of the execution's context
            returning it: `lambda ctx: f"order:{ctx.operation_key}"`, with each call's
            operation key set by `use_context(operation_key=...)` or
            `@pipeline(operation_key=...)` (a key built from a missing operation key is refused).
        ttl: lease length (>= 1 ms); renewed every ttl/3 while the callable runs.
        wait: how long to wait for a held lock before `LockNotAcquiredError` (0: fail fast).
        store: where leases live. Pass `RedisLockStore(redis_client(url))` (`resilience.stores`) to lock across
            processes and machines. The default (`None`) is the process's `MemoryLockStore` for
            the pipeline's clock: it excludes executions of **this process only** (`build()`
            logs that once, at INFO).
        on_lock_lost: called with `OnLockLostArguments` when the lease is lost (after the
            callable's signal aborted); its exceptions are logged.
        cancel_on_lost: also cancel an async callable when the lease is lost.
        shared: hold the key shared (a reader) instead of exclusively (a writer): any number of
            shared holders run together, never with an exclusive one; waiters of both modes
            queue in one FIFO per key (docs/locks.md). The store must offer
            `SupportsSharedHolds`.
        name: the strategy's name (problems, telemetry).
    """
    return LockStrategyOptions(**locals())


_TOLD = threading.Lock()
_NONE_HELD: frozenset[tuple[int, str]] = frozenset()


class _Run:
    """One execution's key, start and lease callbacks (they run in the background, off the execution's thread).

    Made when the execution starts: it resolves the key and refuses re-entry (`LockNotAcquiredError`).
    `OnLockLost` is emitted once, in the execution's context (so on its span): by the
    background callback while the execution runs, or else by the execution itself when the
    lease ends (`tell_lost`), whichever comes first.
    """

    __slots__ = ("context", "held", "inner", "key", "schedule", "started", "strategy", "told")

    def __init__(self, strategy: LockStrategy, context: ResilienceContext) -> None:
        key = strategy._key
        if not isinstance(key, str):
            key = resolve_key(strategy.name, key, context)
        self.started = started = strategy._time_provider.monotonic()
        self.held = held = context.get_property(HELD_LOCKS, _NONE_HELD)  # what the caller's chain holds
        if (strategy._store_id, key) in held:
            raise strategy._reject(context, key, started, None, reentrant=True)
        wait = strategy._wait
        self.schedule = None if wait <= 0 else BackoffSchedule(started, wait, strategy._time_provider.random())
        self.strategy = strategy
        self.key = key
        self.inner = context  # the caller's, until the callable's own context is derived
        self.context: contextvars.Context | None = None  # the execution's, once it holds the lease
        self.told: bool | threading.Event = False  # an Event while the background emits

    def tell_lost(self, lease: LeaseBase, *, ending: bool = False) -> None:
        """Emit `OnLockLost` unless already done, in the execution's context.

        `ending`: the execution itself, before it returns; if the background is emitting at
        that moment, it waits (briefly) for it, so the event lands before the span ends.
        """
        with _TOLD:
            told = self.told
            if told is True:
                return
            if told is False:
                self.told = emitting = threading.Event()
        if told is not False:
            if ending:
                told.wait(1.0)
            return
        try:
            context = self.context
            if context is None:  # pragma: no cover - a lease is lost only after `_enter`
                context = contextvars.copy_context()
            context.run(self.strategy._events.lost, self.inner, self.key, lease)
        finally:
            self.told = True
            emitting.set()

    # The lease hooks (one LeaseParams per strategy): each finds its execution's run in the lease's tag.

    @staticmethod
    def lost(lease: LeaseBase) -> None:
        run = cast("_Run", lease.tag)
        callback = run.strategy._on_lock_lost
        if callback is not None:
            call_sync_hook("on_lock_lost", callback, OnLockLostArguments(run.inner, run.key, lease.token))
        run.tell_lost(lease)

    @staticmethod
    async def lost_async(lease: LeaseBase) -> None:
        run = cast("_Run", lease.tag)
        callback = run.strategy._on_lock_lost
        if callback is not None:
            try:
                await call_back_async(callback, OnLockLostArguments(run.inner, run.key, lease.token))
            except Exception:
                _logger.exception("on_lock_lost raised")
        run.tell_lost(lease)

    @staticmethod
    def renew_failed(lease: LeaseBase, error: Exception) -> None:
        run = cast("_Run", lease.tag)
        run.strategy._events.renewal_failed(run.inner, run.key, lease.token, error)


class LockStrategy:
    """The built lock strategy (see the module docstring)."""

    __slots__ = (
        "_alone",
        "_async_params",
        "_cancel_on_lost",
        "_events",
        "_key",
        "_on_lock_lost",
        "_ops",
        "_params",
        "_store_id",
        "_time_provider",
        "_ttl",
        "_wait",
        "name",
        "traits",
    )

    def __init__(self, options: LockStrategyOptions, context: StrategyBuildContext) -> None:
        self._setup(options, context, "shared" if options.shared else "exclusive", LockLostError)
        store = options.store
        if store is None:
            note_default_store(self.name)
            store = default_lock_store(context.time_provider)
        shared = " (shared holds)" if options.shared else ""
        ops = SharedLockOps(store) if options.shared else LockOps(store)
        self._bind(ops, f"the lock store {store!r}{shared}", "RedisLockStore")

    def _setup(
        self, options: LockStrategyOptions, context: StrategyBuildContext, mode: str, error_type: type[LockLostError]
    ) -> None:
        """Everything but the store: names, durations, the clock, events (in the given mode) and lease parameters."""
        self.name = options.name
        self._key = options.key
        self._ttl = to_seconds(options.ttl)
        self._wait = to_seconds(options.wait)
        self._time_provider: TimeProvider = lease_clock(context.time_provider)  # leases, waits, events: one clock
        self._events = LockEvents(context.telemetry, self._time_provider, mode)
        self._on_lock_lost = options.on_lock_lost
        self._cancel_on_lost = options.cancel_on_lost
        self._params = LeaseParams(
            self._ttl, self._ttl / 3, error_type=error_type, on_lost=_Run.lost, on_renew_error=_Run.renew_failed
        )
        self._async_params = replace(self._params, on_lost=_Run.lost_async)

    def _bind(self, ops: StoreOps, described: str, example: str) -> None:
        """Take leases through `ops`; `described` names its store in a refusal of a flavour it lacks."""
        self._ops = ops
        self.traits = store_traits(
            f"{self.name}: {described}", has_sync=ops.has_sync, has_async=ops.has_async, example=example
        )
        # A context's held set names a hold by store id and key.
        self._store_id = id(ops.store)
        # What the callable's context holds when this lock (on its fixed key) is its only one.
        self._alone: frozenset[tuple[int, str]] = frozenset(
            {(self._store_id, self._key)} if isinstance(self._key, str) else ()
        )

    # -- shared steps -------------------------------------------------------------------------

    def _reject(
        self, context: ResilienceContext, key: str, started: float, retry_after: float | None, *, reentrant: bool
    ) -> LockNotAcquiredError:
        self._events.rejected(context, key, started, retry_after)
        if reentrant:
            msg = f"lock {key!r} is already held by this execution (locks are not reentrant)"
            return LockNotAcquiredError(key, None, message=msg)
        return LockNotAcquiredError(key, retry_after)

    def _enter(self, context: ResilienceContext, run: _Run, lease: LeaseBase) -> ResilienceContext:
        key = run.key
        self._events.acquired(context, key, lease, run.started)
        held = self._alone if not run.held and key == self._key else run.held | {(self._store_id, key)}
        inner = context.derive(signal=lease.signal, properties={LOCK_TOKEN: lease.token, HELD_LOCKS: held})
        run.inner = inner
        run.context = contextvars.copy_context()  # where OnLockLost goes (the execution's span)
        return inner

    def _ended(
        self, run: _Run, lease: LeaseBase, error: LockLostError | None, exc: BaseException | None = None
    ) -> None:
        """Emit the lease's end; for a callable that raised `exc`, raise the loss error instead where step 4 says so."""
        if error is None:
            self._events.released(run.inner, run.key, lease)
            return
        run.tell_lost(lease, ending=True)  # unless the background did, while the span was open
        if isinstance(exc, Exception) and exc is not lease.signal.reason and exc is not error:
            raise error from exc

    # -- sync ---------------------------------------------------------------------------------

    def execute(self, callback: Callable[[ResilienceContext], T], context: ResilienceContext, /) -> T:
        """Acquire, run `callback` under the lease, release (docs/locks.md)."""
        run = _Run(self, context)
        lease, held_for = acquire_lease(
            self._ops,
            run.key,
            params=self._params,
            schedule=run.schedule,
            time_provider=self._time_provider,
            signal=context.signal,
            tag=run,
        )
        if lease is None:
            raise self._reject(context, run.key, run.started, held_for, reentrant=False)
        try:
            result = callback(self._enter(context, run, lease))
        except BaseException as exc:
            self._ended(run, lease, lease.finish(), exc)
            raise
        if lease.finish() is None:  # `_ended`, inline
            self._events.released(run.inner, run.key, lease)
        else:
            run.tell_lost(lease, ending=True)
        return result

    # -- async --------------------------------------------------------------------------------

    async def execute_async(
        self, callback: Callable[[ResilienceContext], Awaitable[T]], context: ResilienceContext, /
    ) -> T:
        """The asyncio twin of `execute`; with `cancel_on_lost` the callable is cancelled on loss."""
        run = _Run(self, context)
        lease, held_for = await acquire_lease_async(
            self._ops,
            run.key,
            params=self._async_params,
            schedule=run.schedule,
            time_provider=self._time_provider,
            signal=context.signal,
            tag=run,
        )
        if lease is None:
            raise self._reject(context, run.key, run.started, held_for, reentrant=False)
        try:
            inner = self._enter(context, run, lease)
            if self._cancel_on_lost:
                async with lease.loss_signal().cancel_scope():
                    result = await callback(inner)
            else:
                result = await callback(inner)
        except BaseException as exc:
            self._ended(run, lease, await lease.finish_async(), exc)
            raise
        self._ended(run, lease, await lease.finish_async())
        return result

    def __repr__(self) -> str:
        return f"<LockStrategy name={self.name!r} key={self._key!r} ttl={self._ttl!r} wait={self._wait!r}>"
