"""The lock and the semaphore for code that holds a Redis client but no pipeline.

    from resilience.primitives import lock
    from resilience.stores import redis_client

    locks = lock(redis_client("redis://localhost:6379/0"), ttl=30)
    receipt = locks.run("order:42", lambda handle: charge(handle.token))

`lock(client)` and `semaphore(client, limit=N)` drive the same lease engine as the pipeline's
lock strategy (`resilience._lease`), with the primitives' parameter set:

- acquisition fails fast by default; `wait=` keeps trying for that long (the lock strategy's
  backoff, woken by releases), `retries=` is a bounded spin (`retry_delay` apart; a wait that
  a release ends early uses up no retry); on a store that queues waiters (Redis, memory) a
  waiting caller joins the key's FIFO queue and is woken when its turn comes;
- `run` / `hold` renew every `heartbeat` (default ttl/4, or never with `heartbeat=False`),
  watch the local deadline, and raise the loss error when the lease was lost, even when the
  body returned;
- a bare `acquire` handle is never renewed nor watched: only its own `extend()` answered False
  aborts its signal (not after the handle's own `release()`: nothing was lost then).

Both emit the five lock events (`OnLockAcquired`, ...) with no pipeline name, and `run` /
`hold` set the ambient lock token (`get_lock_token()`). The strategy and the primitives use the
same scripts and keys, so they exclude each other on the same key.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
from typing import TYPE_CHECKING, Any, Literal, TypedDict, TypeVar, Unpack, cast

from resilience._context import LOCK_TOKEN, current_context, new_context, reset_context, set_context
from resilience._lease import (
    HELD_LOCKS,
    AsyncLease,
    BackoffSchedule,
    Lease,
    LeaseParams,
    LockEvents,
    LockOps,
    SemaphoreOps,
    SharedLockOps,
    SpinSchedule,
    acquire_lease,
    acquire_lease_async,
)
from resilience._runtime._closing import Closing
from resilience._time import SYSTEM_TIME, lease_clock
from resilience._validation import Problems, check_semaphore_permits
from resilience.exceptions import LockLostError, LockNotAcquiredError, SemaphoreLeaseLostError, ValidationError
from resilience.stores import (
    AsyncLockStore,
    AsyncSemaphoreStore,
    AsyncSupportsInspection,
    LockStore,
    SemaphoreStore,
    SupportsInspection,
)
from resilience.stores._memory import MemoryLockStore, MemorySemaphoreStore
from resilience.stores._protocols import serves
from resilience.stores._redis import RedisLockStore, RedisSemaphoreStore, redis_client_kind
from resilience.stores._steps import run_steps, run_steps_async
from resilience.telemetry._source import TelemetrySource

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable
    from contextvars import Token
    from types import TracebackType

    from resilience._context import ResilienceContext
    from resilience._lease import LeaseBase, StoreOps
    from resilience._lease._core import AcquireSchedule
    from resilience._signal import Signal
    from resilience._time import TimeProvider
    from resilience._validation import Duration
    from resilience.stores import LockInfo
    from resilience.stores._steps import Steps

__all__ = ["LockHandle", "LockHold", "Locks", "Semaphores", "lock", "semaphore"]

T = TypeVar("T")


# -- stores -----------------------------------------------------------------------------------


def _is_async_source(client: object) -> bool:
    """Whether a non-client `client` argument yields an asyncio client (told apart by class)."""
    if inspect.isawaitable(client):
        return True
    while isinstance(client, functools.partial):
        client = client.func
    if isinstance(client, type):
        return any(".asyncio" in klass.__module__ for klass in client.__mro__)
    return inspect.iscoroutinefunction(client)


# -- handles ----------------------------------------------------------------------------------


class LockHandle:
    """A held lock (or semaphore slot): what `acquire` returns and `run` / `hold` hand the body.

    - `key`: the key as you gave it (without the prefix).
    - `token`: the fencing token (an int that only increases per key).
    - `signal`: aborts with the `LockLeaseLostError` (`SemaphoreLeaseLostError`) the moment the
      lease is known lost; pass it on to work that can stop.
    - `expires_in()`: seconds until the local deadline.
    - `release()` / `extend(ttl=None)` and their `_async` twins: True only while this holder
      still owns the key; `extend` answered False also aborts the signal.

    A handle is sync or async, as the call that made it: a handle from `acquire` / `run` / `with
    hold` has `release` / `extend`; from `acquire_async` / `run_async` / `async with hold`,
    `release_async` / `extend_async`.
    """

    __slots__ = ("_events", "_lease", "_released", "_ttl")

    def __init__(self, lease: LeaseBase, events: LockEvents) -> None:
        self._lease = lease
        self._events = events
        self._released = False
        self._ttl = lease.ttl  # what extend() restores, even after an extend(ttl) with another

    @property
    def key(self) -> str:
        """The key, as given to the primitive (without its prefix)."""
        return self._lease.key

    @property
    def token(self) -> int:
        """The fencing token of this lease."""
        return self._lease.token

    @property
    def signal(self) -> Signal:
        """Aborts with the lease-lost error as soon as the loss is known."""
        return self._lease.signal

    @property
    def lost(self) -> bool:
        """Whether the lease is known lost."""
        return self._lease.lost

    def expires_in(self) -> float:
        """Seconds left until the local deadline (0 when passed)."""
        return self._lease.expires_in()

    def _sync(self, method: str) -> Lease:
        lease = self._lease
        if not isinstance(lease, Lease):
            msg = f"this handle was acquired asynchronously: await handle.{method}_async() instead of {method}()"
            raise ValidationError(msg)
        return lease

    def _async(self, method: str) -> AsyncLease:
        lease = self._lease
        if not isinstance(lease, AsyncLease):
            msg = f"this handle was acquired synchronously: call handle.{method}() instead of {method}_async()"
            raise ValidationError(msg)
        return lease

    def _did_release(self, released: bool) -> bool:
        if released:
            self._released = True
            self._events.released(None, self._lease.key, self._lease)
        return released

    def release(self) -> bool:
        """Free the key if this holder still owns it (True only then); renewal stops.

        Inside `run` / `hold`, the final release is then skipped (not reported as a loss).
        Store errors propagate.
        """
        return self._did_release(self._sync("release").release())

    async def release_async(self) -> bool:
        """See `release`."""
        return self._did_release(await self._async("release").release_async())

    def extend(self, ttl: Duration | None = None) -> bool:
        """Set the expiry to now + `ttl` (default: the lock's ttl); False if the lease is gone.

        A lease lost to expiry or to another owner aborts the handle's signal with the loss
        error. After this handle's own `release()` the answer is False too, but nothing was
        lost: the signal stays as it was.
        """
        return self._sync("extend").extend(self._extend_ttl(ttl))

    async def extend_async(self, ttl: Duration | None = None) -> bool:
        """See `extend`."""
        return await self._async("extend").extend_async(self._extend_ttl(ttl))

    def _extend_ttl(self, ttl: Duration | None) -> float:
        if ttl is None:
            return self._ttl
        problems = Problems()
        seconds = problems.duration("ttl", ttl, minimum=0.001)
        if seconds is None:
            raise ValidationError(problems.items)
        return seconds

    def __repr__(self) -> str:
        return f"<LockHandle key={self.key!r} token={self.token} lost={self.lost}>"


# -- run / hold -------------------------------------------------------------------------------


class AcquireOptions(TypedDict, total=False):
    """The options of `Locks.acquire` after the key, as `Semaphores.acquire` and its twin take them."""

    ttl: Duration | None
    retries: int
    retry_delay: Duration
    wait: Duration | None
    shared: bool  # a lock's; a semaphore refuses True


class HoldOptions(AcquireOptions, total=False):
    """The options of `Locks.hold` after the key, as `Semaphores` passes them on."""

    heartbeat: Duration | Literal[False] | None
    on_renew_error: Callable[[Exception], object] | None


@dataclasses.dataclass(slots=True)
class _Options:
    """One call's validated options."""

    ttl: float
    retries: int
    retry_delay: float
    heartbeat: float | None  # None: no renewal (always for `acquire`)
    on_renew_error: Any
    wait: float | None = None
    shared: bool = False
    permits: int = 1  # the semaphore's slots per holder


class LockHold:
    """`hold(key, ...)`: `run` as a context manager, for `with` and `async with`.

    Entering acquires (or raises `LockNotAcquiredError`), sets the ambient lock token and yields
    the `LockHandle`; leaving releases, and raises the lease-lost error when the lease was lost
    while the block ran, even when the block completed. One `LockHold` holds at most once at a
    time.
    """

    __slots__ = ("_context_token", "_handle", "_key", "_options", "_primitive")

    def __init__(self, primitive: Locks, key: str, options: _Options) -> None:
        self._primitive = primitive
        self._key = key
        self._options = options
        self._handle: LockHandle | None = None
        self._context_token: Token[ResilienceContext | None] | None = None

    def _entering(self, *, is_async: bool) -> Steps[LockHandle]:
        """Acquire (one step: the engine's acquire), set the ambient lock token; the handle."""
        primitive, key = self._primitive, self._key
        primitive._need("hold", is_async=is_async, shared=self._options.shared)
        if self._handle is not None:
            msg = f"hold({key!r}) is already held: a LockHold cannot be entered twice at once"
            raise ValidationError(msg)
        outer = current_context()
        started = primitive._tp.monotonic()
        held_id = primitive._held_id(key)
        if outer is not None and held_id is not None and held_id in outer.get_property(HELD_LOCKS, frozenset()):
            primitive._mode_of(shared=self._options.shared)[1].rejected(None, key, started, None)
            msg = f"lock {key!r} is already held by this execution (locks are not reentrant)"
            raise LockNotAcquiredError(key, None, message=msg)
        parent = None if outer is None else outer.signal
        lease, held_for = yield primitive._acquire(key, self._options, parent, run=True, is_async=is_async)
        handle = self._handle = primitive._handle(key, lease, held_for, started, self._options)
        if handle is None:
            raise primitive._refusal(key, held_for)
        outer = outer or new_context()
        inner = outer.derive(signal=handle.signal)
        inner.properties.set(LOCK_TOKEN, handle.token)
        if held_id is not None:  # the strategy and nested holds see it (locks are not reentrant)
            inner.properties.set(HELD_LOCKS, outer.get_property(HELD_LOCKS, frozenset()) | {held_id})
        self._context_token = set_context(inner)
        return handle

    def _leaving(self, exc: BaseException | None, *, is_async: bool) -> Steps[None]:
        """Release (one step: the lease's finish) and report the end; raise the loss error when the lease was lost.

        See docs/primitives.md.
        """
        handle = self._handle
        assert handle is not None
        self._handle = None
        token, self._context_token = self._context_token, None
        if token is not None:
            reset_context(token)
        lease = handle._lease
        error = yield cast("AsyncLease", lease).finish_async() if is_async else cast("Lease", lease).finish()
        if error is None:
            if not handle._released:
                handle._events.released(None, handle.key, lease)
            return
        if exc is None:
            raise error
        if isinstance(exc, Exception) and exc is not error and exc is not handle.signal.reason:
            raise error from exc

    def __enter__(self) -> LockHandle:
        return run_steps(self._entering(is_async=False))

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        run_steps(self._leaving(exc, is_async=False))

    async def __aenter__(self) -> LockHandle:
        return await run_steps_async(self._entering(is_async=True))

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        await run_steps_async(self._leaving(exc, is_async=True))

    def __repr__(self) -> str:
        return f"<LockHold key={self._key!r} held={self._handle is not None}>"


# -- the primitives ---------------------------------------------------------------------------


class Locks(Closing):
    """Locks on keys, over one store: what `lock(client)` returns.

    See `lock` for the arguments, and the module docstring for the lease policy. Every method
    validates its options (raising `ValidationError` naming the option) before any lock is taken.
    """

    _kind: str = "lock"
    _strategy_name: str = "Lock"
    _mode: str = "exclusive"  # `lock.mode` of the events and of `resilience.lock.held`
    _error_type: type[LockLostError] = LockLostError
    _redis_type: type[RedisLockStore | RedisSemaphoreStore] = RedisLockStore  # the store made from a client

    __slots__ = ("_events", "_ops", "_owns_store", "_shared", "_tp", "store", "ttl")

    def __init__(self, client: object, *, prefix: str, ttl: Duration, time_provider: TimeProvider | None) -> None:
        problems = Problems()
        prefix_value: object = prefix
        if not isinstance(prefix_value, str) or not prefix_value:
            problems.add("prefix", f"must be a non-empty str, got {prefix!r}")
        seconds = problems.duration("ttl", ttl, minimum=0.001)
        if time_provider is not None and not callable(getattr(time_provider, "monotonic", None)):
            problems.add("time_provider", f"must be a TimeProvider, got {time_provider!r}")
        self._extra_checks(problems)
        if problems:
            raise ValidationError(problems.items)
        assert seconds is not None
        self.ttl: float = seconds
        """The default lease length (seconds)."""
        made = self._store_from_client(client, prefix)
        self.store: object = client if made is None else made
        """The store the leases live in (made from the client, or the one passed)."""
        self._owns_store = made is not None
        memory = client if isinstance(client, MemoryLockStore | MemorySemaphoreStore) else None
        if time_provider is None:
            time_provider = SYSTEM_TIME if memory is None else memory.time_provider
        elif memory is not None and memory.time_provider is not time_provider:
            msg = (
                "time_provider: a memory store must use the primitive's time provider (leases expire on its "
                "clock): create it with MemoryLockStore(time_provider) or leave time_provider=None"
            )
            raise ValidationError(msg)
        self._tp: TimeProvider = lease_clock(time_provider)  # the real clock for the system clock
        # A store made from the client applies the prefix itself; before a store passed, the adapter puts it.
        self._ops: StoreOps = self._make_ops(self.store, "" if self._owns_store else f"{prefix}:")
        self._events = LockEvents(TelemetrySource(strategy_name=self._strategy_name), self._tp, self._mode)
        self._shared: tuple[StoreOps, LockEvents] | None = None  # made on the first shared hold

    # -- construction hooks (the semaphore overrides them) ----------------------------------

    def _extra_checks(self, problems: Problems) -> None:
        """More option checks (the semaphore's `limit`)."""

    def _check_store_kind(self, store: object) -> None:
        if not serves(store, LockStore, AsyncLockStore):
            msg = f"client: {store!r} is a semaphore store: use semaphore(...) or pass a lock store"
            raise ValidationError(msg)

    def _make_ops(self, store: object, prefix: str) -> StoreOps:
        return LockOps(store, prefix)

    def _store_from_client(self, client: object, prefix: str) -> object | None:
        """The Redis store made from `client`, or None when `client` is a store (of this primitive's kind)."""
        if kind := redis_client_kind(client):
            is_async = kind == "async"
        elif not isinstance(client, type) and isinstance(
            client, LockStore | AsyncLockStore | SemaphoreStore | AsyncSemaphoreStore
        ):
            self._check_store_kind(client)
            return None
        elif callable(client) or inspect.isawaitable(client):
            is_async = _is_async_source(client)
        else:
            msg = (
                f"client: must be a redis client (sync or asyncio), an awaitable or zero-argument factory of "
                f"one, or a {self._kind} store, got {client!r}"
            )
            raise ValidationError(msg)
        if is_async:
            return self._redis_type(None, async_client=client, prefix=prefix)
        return self._redis_type(client, prefix=prefix)

    # -- flavour checks ---------------------------------------------------------------------

    def _need(self, method: str, *, is_async: bool, shared: bool = False) -> None:
        """Raise unless the store serves `method`'s flavour (and `shared`, a validated option, in it)."""
        kind = self._kind
        flavour = "asyncio" if is_async else "sync"
        if not (self._ops.has_async if is_async else self._ops.has_sync):
            if is_async:
                client = f"{kind}(redis.asyncio.Redis(...)) (an asyncio client, an awaitable or an async factory)"
                store = "the _async methods (e.g. RedisLockStore(async_client=...))"
                other = "`with hold()`" if method == "hold" else f"{method.removesuffix('_async')}()"
            else:
                client = f"{kind}(redis.Redis(...)) (a sync client or a zero-argument factory of one)"
                store = "the sync methods (e.g. RedisLockStore(redis.Redis(...)))"
                other = "`async with hold()`" if method == "hold" else f"{method}_async()"
            hint = client if self._owns_store else f"a store with {store} to {kind}()"
            msg = f"{kind}(...).{method}: this {kind} has no {flavour} client: pass {hint}, or call {other}"
            raise ValidationError(msg)
        shared_ops = self._mode_of(shared=True)[0] if shared else None
        if shared_ops is not None and not (shared_ops.has_async if is_async else shared_ops.has_sync):
            capability = "AsyncSupportsSharedHolds" if is_async else "SupportsSharedHolds"
            msg = (
                f"{kind}(...).{method}: shared=True: the store {self.store!r} cannot hold keys shared from "
                f"{flavour} code (it does not offer {capability})"
            )
            raise ValidationError(msg)

    # -- validation -------------------------------------------------------------------------

    def _options(  # noqa: PLR0917 - the API's options in their order, so that each method passes them on whole
        self,
        key: object,
        ttl: Duration | None = None,
        retries: object = 0,
        retry_delay: object = 0.1,
        wait: object = None,
        heartbeat: object = None,
        on_renew_error: object = None,
        shared: object = False,
        *,
        run: bool,
        permits: int = 1,
    ) -> _Options:
        """One call's options, validated (`permits`: a semaphore's, checked against its limit by the caller)."""
        problems = Problems()
        self._check_shared(problems, shared)
        if not isinstance(key, str) or not key:
            problems.add("key", f"must be a non-empty str, got {key!r}")
        seconds = self.ttl if ttl is None else problems.duration("ttl", ttl, minimum=0.001)
        count = problems.integer("retries", retries, minimum=0)
        delay = problems.duration("retry_delay", retry_delay)
        budget = None if wait is None else problems.duration("wait", wait)
        if wait is not None and retries != 0:
            problems.add("wait", "give either wait (a time budget) or retries (a count), not both")
        interval: float | None = None
        if run:
            if heartbeat is None:
                interval = None if seconds is None else max(0.001, seconds / 4)
            elif heartbeat is True:
                problems.add("heartbeat", "must be None (ttl/4), False (no renewal) or a positive duration, got True")
            elif heartbeat is not False:  # False: no renewal (the interval stays None)
                interval = problems.duration("heartbeat", heartbeat, positive=True)
                if interval is not None and seconds is not None and interval > seconds / 2:
                    problems.add(
                        "heartbeat",
                        f"must be at most half of ttl ({seconds / 2:g}s), got {interval:g}s: the lease "
                        "could lapse before the first renewal",
                    )
                elif interval is not None and seconds is not None and interval < max(0.001, seconds / 1000):
                    problems.add(
                        "heartbeat",
                        f"must be at least {max(0.001, seconds / 1000):g}s (1 ms and ttl/1000), got {interval:g}s: "
                        "a renewal storm, not a heartbeat",
                    )
            problems.callable("on_renew_error", on_renew_error)
        if problems:
            raise ValidationError(problems.items)
        assert seconds is not None
        assert count is not None
        assert delay is not None
        return _Options(
            seconds, count, delay, interval, on_renew_error, wait=budget, shared=shared is True, permits=permits
        )

    def _check_shared(self, problems: Problems, shared: object) -> None:
        """Record what is wrong with `shared` (the semaphore has none)."""
        if problems.boolean("shared", shared) and shared and not SharedLockOps.supported(self.store):
            problems.add(
                "shared",
                f"the store {self.store!r} cannot hold keys shared (it does not offer SupportsSharedHolds): "
                "use a MemoryLockStore, PostgresLockStore or RedisLockStore, or shared=False",
            )

    def _mode_of(self, *, shared: bool) -> tuple[StoreOps, LockEvents]:
        """The store calls and the events of exclusive holds, or of shared ones."""
        if not shared:
            return self._ops, self._events
        mode = self._shared
        if mode is None:
            events = LockEvents(TelemetrySource(strategy_name=self._strategy_name), self._tp, "shared")
            mode = self._shared = (SharedLockOps(self._ops.store, self._ops.prefix), events)
        return mode

    # -- engine -----------------------------------------------------------------------------

    @staticmethod
    def _lost(lease: LeaseBase) -> None:
        cast("LockEvents", lease.tag).lost(None, lease.key, lease)

    @staticmethod
    def _renew_failed(on_renew_error: Any, lease: LeaseBase, error: Exception) -> object:
        cast("LockEvents", lease.tag).renewal_failed(None, lease.key, lease.token, error)
        return None if on_renew_error is None else on_renew_error(error)

    def _refusal(self, key: str, held_for: float | None) -> LockNotAcquiredError:
        """What `run` / `hold` raise when `key` stays held (its rejection already reported)."""
        return LockNotAcquiredError(key, held_for)

    def _held_id(self, key: str) -> tuple[int, str] | None:
        """The key as the lock strategy records held keys (store, key in it); None: reentry is allowed."""
        return (id(self.store), self._ops.prefix + key)

    def _owner(self) -> str | None:
        """The owner id of the next acquisition (None: a random one, `new_owner`)."""
        return None

    def _schedule(self, options: _Options) -> AcquireSchedule | None:
        """`wait=`: the lock strategy's backoff within a time budget; `retries=`: a bounded spin; else fail fast."""
        if options.wait:
            return BackoffSchedule(self._tp.monotonic(), options.wait, self._tp.random())
        return SpinSchedule(options.retries, options.retry_delay) if options.retries else None

    def _ops_for(self, options: _Options, *, is_async: bool) -> StoreOps:  # noqa: ARG002 - the semaphore's hook
        """The store calls for one acquire (the semaphore's ask for its `permits`)."""
        return self._ops

    def _acquire(self, key: str, options: _Options, parent: Signal | None, *, run: bool, is_async: bool) -> Any:
        """The engine's `(lease, held_for)` for one acquisition; with `is_async`, the coroutine that gives it."""
        shared_ops, events = self._mode_of(shared=options.shared)
        return (acquire_lease_async if is_async else acquire_lease)(
            shared_ops if options.shared else self._ops_for(options, is_async=is_async),
            key,
            params=LeaseParams(  # a `run` / `hold` lease renews and watches its deadline; a bare `acquire` one neither
                ttl=options.ttl,
                renew_interval=options.heartbeat,
                watch_deadline=run,
                error_type=self._error_type,
                on_lost=self._lost,
                on_renew_error=functools.partial(self._renew_failed, options.on_renew_error) if run else None,
            ),
            schedule=self._schedule(options),
            time_provider=self._tp,
            signal=parent,
            owner=self._owner(),
            tag=events,
        )

    # -- the API ----------------------------------------------------------------------------

    def hold(
        self,
        key: str,
        /,
        *,
        ttl: Duration | None = None,
        retries: int = 0,
        retry_delay: Duration = 0.1,
        wait: Duration | None = None,
        heartbeat: Duration | Literal[False] | None = None,
        on_renew_error: Callable[[Exception], object] | None = None,
        shared: bool = False,
    ) -> LockHold:
        """`run` as a context manager: `with locks.hold(key) as handle:` (or `async with`).

        Same options and semantics as `run`; the block is the body.
        """
        options = self._options(key, ttl, retries, retry_delay, wait, heartbeat, on_renew_error, shared, run=True)
        return LockHold(self, key, options)

    def run(
        self,
        key: str,
        fn: Callable[[LockHandle], T],
        /,
        *,
        ttl: Duration | None = None,
        retries: int = 0,
        retry_delay: Duration = 0.1,
        wait: Duration | None = None,
        heartbeat: Duration | Literal[False] | None = None,
        on_renew_error: Callable[[Exception], object] | None = None,
        shared: bool = False,
    ) -> T:
        """Run `fn(handle)` while holding `key`; renew in the background; release at the end.

        Args:
            key: what to lock (without the prefix).
            fn: the body; it gets the `LockHandle` (token, signal, ...).
            ttl: lease length (default: the primitive's ttl), >= 1 ms.
            retries: more attempts when the key is held (0: fail fast), `retry_delay` apart; a
                wait ends early when the store announces a release, and such a wake-up does
                not use up a retry (within the nominal `retries * retry_delay`).
            retry_delay: the wait between attempts.
            wait: instead of `retries`, keep trying for this long (a `Duration`), in the
                store's fair order, woken by releases (like the lock strategy's `wait`);
                giving both is a `ValidationError`.
            heartbeat: renewal period: None for max(1 ms, ttl/4), False for no renewal (the
                local deadline still applies), or a duration of at most ttl/2.
            on_renew_error: told `exc` when a renewal round trip failed (not a loss: the next
                tick retries); its exceptions are logged.
            shared: hold `key` shared (a reader) instead of exclusively (a writer): shared holders
                run together, never with an exclusive one; waiters of both modes queue in one
                FIFO per key (docs/locks.md). The store must offer `SupportsSharedHolds`.

        Raises:
            LockNotAcquiredError: the key stayed held (`.key`); `fn` never ran.
            LockLeaseLostError: the lease was lost while `fn` ran, even if `fn` returned
                (`SemaphoreLeaseLostError` for a semaphore). If `fn` raised the abort reason
                itself, that propagates unchanged; another exception is chained as the cause.
            ValidationError: a bad option, or a sync call on an asyncio-only client.
        """
        options = self._options(key, ttl, retries, retry_delay, wait, heartbeat, on_renew_error, shared, run=True)
        self._need("run", is_async=False, shared=options.shared)
        with LockHold(self, key, options) as handle:
            return fn(handle)

    async def run_async(
        self,
        key: str,
        fn: Callable[[LockHandle], Awaitable[T]],
        /,
        *,
        ttl: Duration | None = None,
        retries: int = 0,
        retry_delay: Duration = 0.1,
        wait: Duration | None = None,
        heartbeat: Duration | Literal[False] | None = None,
        on_renew_error: Callable[[Exception], object] | None = None,
        shared: bool = False,
    ) -> T:
        """The asyncio twin of `run`: `await fn(handle)` while holding `key`."""
        options = self._options(key, ttl, retries, retry_delay, wait, heartbeat, on_renew_error, shared, run=True)
        self._need("run_async", is_async=True, shared=options.shared)
        async with LockHold(self, key, options) as handle:
            return await fn(handle)

    def acquire(
        self,
        key: str,
        /,
        *,
        ttl: Duration | None = None,
        retries: int = 0,
        retry_delay: Duration = 0.1,
        wait: Duration | None = None,
        shared: bool = False,
    ) -> LockHandle | None:
        """Take `key` and return its handle, or None when it stays held.

        The handle is never renewed or watched in the background: call `extend()` yourself if
        the work can outlive the ttl (only `extend()` answered False aborts its signal), and
        `release()` when done.
        """
        options = self._options(key, ttl, retries, retry_delay, wait, shared=shared, run=False)
        self._need("acquire", is_async=False, shared=options.shared)
        return run_steps(self._taking(key, options, is_async=False))

    def _taking(self, key: str, options: _Options, *, is_async: bool) -> Steps[LockHandle | None]:
        """`acquire` once its options are valid: take `key` (one step: the engine's acquire); the handle or None.

        The wait is under a child of the caller's signal: as in a pipeline, no lock is taken, and
        no wait goes on, under an aborted signal. It is detached once `acquire` returns, so the
        handle's own signal then aborts only when its `extend()` answers False.
        """
        started = self._tp.monotonic()
        ambient = current_context()
        if ambient is not None:
            ambient.raise_if_aborted()
        waiting = None if ambient is None else ambient.signal.child()
        try:
            lease, held_for = yield self._acquire(key, options, waiting, run=False, is_async=is_async)
        finally:
            if waiting is not None:
                waiting.detach()
        return self._handle(key, lease, held_for, started, options)

    async def acquire_async(
        self,
        key: str,
        /,
        *,
        ttl: Duration | None = None,
        retries: int = 0,
        retry_delay: Duration = 0.1,
        wait: Duration | None = None,
        shared: bool = False,
    ) -> LockHandle | None:
        """The asyncio twin of `acquire` (its options spelled out: no keyword dict on this path)."""
        options = self._options(key, ttl, retries, retry_delay, wait, shared=shared, run=False)
        self._need("acquire_async", is_async=True, shared=options.shared)
        return await run_steps_async(self._taking(key, options, is_async=True))

    def _handle(
        self, key: str, lease: LeaseBase | None, held_for: float | None, started: float, options: _Options
    ) -> LockHandle | None:
        events = self._mode_of(shared=options.shared)[1]
        if lease is None:
            events.rejected(None, key, started, held_for)
            return None
        events.acquired(None, key, lease, started)
        return LockHandle(lease, events)

    # -- inspection -------------------------------------------------------------------------

    def _inspected(self, key: object, method: str, *, is_async: bool) -> tuple[Any, str]:
        """The store and `key` under the prefix, once the flavour, `key` and the capability for `method` are checked."""
        self._need(method, is_async=is_async)
        if not isinstance(key, str) or not key:
            msg = f"key: must be a non-empty str, got {key!r}"
            raise ValidationError(msg)
        store = self._ops.store
        if not serves(store, AsyncSupportsInspection if is_async else SupportsInspection):
            capability = "AsyncSupportsInspection" if is_async else "SupportsInspection"
            msg = f"{self._kind}(...).{method}: the store {self.store!r} cannot inspect its keys (no {capability})"
            raise ValidationError(msg)
        return store, self._ops.prefix + key

    def info(self, key: str, /) -> LockInfo | None:
        """Who holds `key` now: None when it is free, else a `LockInfo` (`key` as you named it).

        `mode` is `"exclusive"` for a lock (`"semaphore"` for a semaphore); `holders` are the
        live holders by token, each with its owner id, token, seconds left on the store's
        clock and permits; `waiters` is the length of the key's queue (None when the store
        does not record waiters: PostgreSQL).
        """
        store, name = self._inspected(key, "info", is_async=False)
        found = store.info(name)
        return None if found is None else dataclasses.replace(found, key=key)

    async def info_async(self, key: str, /) -> LockInfo | None:
        """See `info`."""
        store, name = self._inspected(key, "info_async", is_async=True)
        found = await store.info_async(name)
        return None if found is None else dataclasses.replace(found, key=key)

    def force_release(self, key: str, /) -> bool:
        """Break `key` whoever holds it: True if it was held, False if it was free.

        The holders are not interrupted: each one's next renewal answers False, which aborts
        its signal (`run` / `hold` then raise the lease-lost error); queued waiters are woken
        as by a release. What keeps a holder that is still running from doing harm is fencing:
        the next holder's token is larger.
        """
        store, name = self._inspected(key, "force_release", is_async=False)
        return bool(store.force_release(name))

    async def force_release_async(self, key: str, /) -> bool:
        """See `force_release`."""
        store, name = self._inspected(key, "force_release_async", is_async=True)
        return bool(await store.force_release_async(name))

    # -- closing ----------------------------------------------------------------------------

    def close(self) -> None:
        """Close what the primitive opened (a store made from a client: its release listener).

        Clients stay open (they are yours), and so does a store you passed.
        """
        if self._owns_store and isinstance(self.store, RedisLockStore | RedisSemaphoreStore):
            self.store.close()

    async def aclose(self) -> None:
        """The asyncio twin of `close` (also stops this loop's release listener)."""
        if self._owns_store and isinstance(self.store, RedisLockStore | RedisSemaphoreStore):
            await self.store.aclose()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} store={self.store!r} ttl={self.ttl:g}>"


class Semaphores(Locks):
    """Semaphores on keys, over one store: what `semaphore(client, limit=N)` returns.

    The same API and lease policy as `Locks`, with up to `limit` slots per key; each holder
    takes `permits` of them (1 by default) all at once, and gets its own token. A lost slot
    raises `SemaphoreLeaseLostError`. Waiters are served in arrival order: a request for more
    slots than are free is not overtaken by later, smaller ones.
    """

    _kind = "semaphore"
    _strategy_name = "Semaphore"
    _mode = "semaphore"
    _error_type = SemaphoreLeaseLostError
    _redis_type = RedisSemaphoreStore

    __slots__ = ("limit",)

    def __init__(
        self, client: object, *, limit: int, prefix: str, ttl: Duration, time_provider: TimeProvider | None
    ) -> None:
        self.limit = limit
        """How many slots a key has."""
        super().__init__(client, prefix=prefix, ttl=ttl, time_provider=time_provider)

    def _extra_checks(self, problems: Problems) -> None:
        problems.integer("limit", self.limit, minimum=1)

    def _check_store_kind(self, store: object) -> None:
        if not serves(store, SemaphoreStore, AsyncSemaphoreStore):
            msg = f"client: {store!r} is a lock store: use lock(...) or pass a semaphore store"
            raise ValidationError(msg)

    def _make_ops(self, store: object, prefix: str) -> StoreOps:
        return SemaphoreOps(store, self.limit, prefix)

    def _ops_for(self, options: _Options, *, is_async: bool) -> StoreOps:
        ops = self._ops
        assert isinstance(ops, SemaphoreOps)
        if options.permits > 1 and not (ops.takes_permits_async if is_async else ops.takes_permits):
            msg = (
                f"permits: {self.store!r} cannot give one holder several slots (it does not implement "
                f"{'AsyncSupportsPermits' if is_async else 'SupportsPermits'}): ask for permits=1 or use "
                "MemorySemaphoreStore, RedisSemaphoreStore or PostgresSemaphoreStore"
            )
            raise ValidationError(msg)
        return ops.with_permits(options.permits)

    def _refusal(self, key: str, held_for: float | None) -> LockNotAcquiredError:
        return LockNotAcquiredError(key, held_for, message=f"semaphore {key!r} has no free slot (limit {self.limit})")

    def _check_shared(self, problems: Problems, shared: object) -> None:
        if shared is not False:
            problems.add("shared", "a semaphore has no shared holds: its limit already admits several holders")

    def _held_id(self, key: str) -> tuple[int, str] | None:  # noqa: ARG002 - the lock's hook
        """A chain may hold several slots of one semaphore: no reentry check."""
        return None

    def _available(self, found: LockInfo | None) -> int:
        return self.limit - (0 if found is None else sum(holder.permits for holder in found.holders))

    def available(self, key: str, /) -> int:
        """How many slots of `key` are free now: `limit` minus the permits its live holders have.

        Never negative (holders taken under a larger limit count in full). Needs the store's
        inspection capability, as `info` does.
        """
        return max(0, self._available(self.info(key)))

    async def available_async(self, key: str, /) -> int:
        """See `available`."""
        return max(0, self._available(await self.info_async(key)))

    def hold(self, key: str, /, *, permits: int = 1, **options: Unpack[HoldOptions]) -> LockHold:
        """`Locks.hold` (same options), taking `permits` slots (1 <= permits <= limit) at once."""
        slots = check_semaphore_permits(self.limit, permits)
        return LockHold(self, key, self._options(key, run=True, permits=slots, **options))

    def run(self, key: str, fn: Callable[[LockHandle], T], /, *, permits: int = 1, **options: Unpack[HoldOptions]) -> T:
        """`Locks.run` (same options), holding `permits` slots (1 <= permits <= limit, all or none) while `fn` runs."""
        self._need("run", is_async=False)
        with self.hold(key, permits=permits, **options) as handle:
            return fn(handle)

    async def run_async(
        self, key: str, fn: Callable[[LockHandle], Awaitable[T]], /, *, permits: int = 1, **options: Unpack[HoldOptions]
    ) -> T:
        """The asyncio twin of `run`."""
        self._need("run_async", is_async=True)
        async with self.hold(key, permits=permits, **options) as handle:
            return await fn(handle)

    def acquire(self, key: str, /, *, permits: int = 1, **options: Unpack[AcquireOptions]) -> LockHandle | None:
        """`Locks.acquire` (same options), taking `permits` slots (1 <= permits <= limit) all at once, or none.

        With `wait=`, the request queues in arrival order: later, smaller requests do not take
        the slots it waits for. The handle's `release()` frees all of them.
        """
        valid = self._options(key, run=False, permits=check_semaphore_permits(self.limit, permits), **options)
        self._need("acquire", is_async=False)
        return run_steps(self._taking(key, valid, is_async=False))

    async def acquire_async(
        self, key: str, /, *, permits: int = 1, **options: Unpack[AcquireOptions]
    ) -> LockHandle | None:
        """The asyncio twin of `acquire`."""
        valid = self._options(key, run=False, permits=check_semaphore_permits(self.limit, permits), **options)
        self._need("acquire_async", is_async=True)
        return await run_steps_async(self._taking(key, valid, is_async=True))


def lock(
    client: object,
    /,
    *,
    prefix: str = "lock",
    ttl: Duration = 30.0,
    time_provider: TimeProvider | None = None,
) -> Locks:
    """Locks on keys: one holder per key, across processes when the store is Redis.

    Args:
        client: a sync redis-py/valkey client (`Redis`, `RedisCluster`) or a zero-argument
            factory of one (enables `run`, `acquire`, `with hold`); an asyncio client (told
            apart by its class), an awaitable or an async factory of one (enables `run_async`,
            `acquire_async`, `async with hold`); or any lock store (`MemoryLockStore`,
            `RedisLockStore`, your own). Calling a flavour the client cannot serve raises
            `ValidationError` naming the client to pass.
        prefix: with a client, the Redis key prefix (`order:42` is the key `lock:order:42`, as
            for `RedisLockStore(client, prefix=...)`, so the pipeline's lock strategy on that
            store excludes these locks); with a store, prepended to each key once
            (`<prefix>:<key>`).
        ttl: the default lease length (>= 1 ms); `run`, `hold` and `acquire` can override it.
        time_provider: the clock (default: the system clock, or a memory store's own clock).
    """
    return Locks(client, prefix=prefix, ttl=ttl, time_provider=time_provider)


def semaphore(
    client: object,
    /,
    *,
    limit: int,
    prefix: str = "semaphore",
    ttl: Duration = 30.0,
    time_provider: TimeProvider | None = None,
) -> Semaphores:
    """Semaphores on keys: up to `limit` holders per key at once, each with its own token.

    The same arguments as `lock` (a client, or any semaphore store: `MemorySemaphoreStore`,
    `RedisSemaphoreStore`, `PostgresSemaphoreStore`), plus `limit` (an int >= 1). `run`,
    `hold`, `acquire` and their twins also take `permits` (1 <= permits <= limit): that many
    slots at once, all or none, served in arrival order. A lost slot raises
    `SemaphoreLeaseLostError`.
    """
    return Semaphores(client, limit=limit, prefix=prefix, ttl=ttl, time_provider=time_provider)
