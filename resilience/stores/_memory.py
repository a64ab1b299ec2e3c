"""In-process lease stores: `MemoryLockStore` and `MemorySemaphoreStore`.

Both are thread-safe (one `threading.Lock` per store, held for a few dictionary operations),
offer the sync and async protocols, lease info and release notification. Expiry is measured on
the store's time provider, so leases expire when a `FakeTimeProvider` is advanced.

Tokens come from one counter per store: they only increase, across keys, release and expiry.
Memory stays bounded when keys are unbounded: nothing is kept for a key whose lease ended
(released, or expired and swept), and waiters are forgotten when their wait ends.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import math
import threading
import weakref
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Self, TypeVar

from resilience._runtime._threads import resolve_threadsafe
from resilience._time import SYSTEM_TIME, clock_wait, clock_wait_async, lease_clock
from resilience._validation import check_semaphore_permits
from resilience.stores._info import HolderInfo, HoldersFromInfo, LockInfo, lock_mode
from resilience.stores._protocols import StoreCapabilities
from resilience.stores._steps import inline_twin

if TYPE_CHECKING:
    from collections.abc import Callable, Collection, Sequence

    from resilience._time import TimeProvider

__all__ = ["MemoryLockStore", "MemorySemaphoreStore"]

_SWEEP_FLOOR = 1024
QUEUE_ENTRY = 3.0
"""How long a waiter's queue entry lives (seconds) unless it tries again (as `RedisLockStore`'s)."""
QUEUE_BOUND = 1000
"""At most this many waiters queue per lock; more keep polling outside the queue."""


def _alive(ref: Callable[[], TimeProvider | None]) -> TimeProvider:
    """The clock behind a store's (weak) reference."""
    provider = ref()
    if provider is None:  # pragma: no cover - the registry drops the store with its clock
        msg = "the time provider of this store was garbage-collected"
        raise RuntimeError(msg)
    return provider


def _round_ttl(ttl: float) -> float:
    """A ttl rounded up to whole milliseconds (at least one); remembered for the few ttls in use."""
    rounded = _ROUNDED.get(ttl)
    if rounded is None:
        rounded = max(1, math.ceil(round(ttl * 1000, 6))) / 1000
        if len(_ROUNDED) < _ROUNDED_MAX:  # a bounded memo: arbitrary `extend` ttls never grow it
            _ROUNDED[ttl] = rounded
    return rounded


_ROUNDED: dict[float, float] = {}
_ROUNDED_MAX = 256


_Entry = TypeVar("_Entry", bound=tuple[Any, ...])


def _live_entries(table: dict[str, dict[str, _Entry]], key: str, now: float, at: int) -> dict[str, _Entry] | None:
    """Under the mutex: `table[key]` without the entries whose expiry (field `at`) has passed; None when empty."""
    entries = table.get(key)
    if entries is None:
        return None
    if any(entry[at] <= now for entry in entries.values()):
        entries = {owner: entry for owner, entry in entries.items() if entry[at] > now}
        if not entries:
            del table[key]
            return None
        table[key] = entries
    return entries


class _MemoryStore:
    """What both memory stores share: the clock, the token counter, waiters and the sweep."""

    # Waiters queue in the store (`acquire_or_queue`). Its async methods never suspend, so the
    # engine may call the sync ones instead; its `renew_many` is a few dict updates under its
    # lock, so the sync runtime may run a batch on its timer thread (not a subclass's own
    # renewal code, which could block every lease).
    capabilities: StoreCapabilities = StoreCapabilities(fair_queue=True, answers_inline=True, renews_on_timer=True)
    _queues: dict[str, dict[str, tuple[float, Any]]]  # key -> waiting owner -> (entry expiry, what it asks), FIFO

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        # A subclass that overrides an async method may suspend there (a test double does).
        if cls.__module__ != __name__ and any(name.endswith("_async") for name in vars(cls)):
            cls.capabilities = replace(cls.capabilities, answers_inline=False)
        if cls.__module__ != __name__ and "renew" in vars(cls) and "renew_many" not in vars(cls):
            cls.renew_many = None  # type: ignore[assignment] # not offered: the engine calls its `renew` for each
        if cls.__module__ != __name__ and "renew_many" in vars(cls):
            cls.capabilities = replace(cls.capabilities, renews_on_timer=False)

    def __init__(self, time_provider: TimeProvider | None = None) -> None:
        provider = time_provider or SYSTEM_TIME
        self._provider_ref: Callable[[], TimeProvider | None] = lambda: provider
        # Read twice per lease (acquire, release): a bound method, not the property. Leases
        # expire on the clock the lease runtime reads (`lease_clock`: the real one for the
        # system clock, which a freezegun freeze does not move).
        self._now: Callable[[], float] = lease_clock(provider).monotonic
        self._mutex = threading.Lock()
        self._tokens = itertools.count(1)
        # key -> id -> (callback, the queued owner it waits for, None for any release)
        self._listeners: dict[str, dict[int, tuple[Callable[[], object], str | None]]] = {}
        self._listener_ids = itertools.count()
        self._sweep_at = _SWEEP_FLOOR

    @classmethod
    def _weakly(cls, time_provider: TimeProvider) -> Self:
        """A store that references its clock weakly (the per-clock default store registry).

        The registry is keyed weakly by the clock; a store holding its clock strongly would
        keep the key alive forever.
        """
        store = cls(time_provider)
        store._provider_ref = ref = weakref.ref(time_provider)
        if lease_clock(time_provider) is time_provider:  # `_now` is then the clock's bound method
            # Read through the weak reference instead: the bound method would hold the clock.
            store._now = lambda: _alive(ref).monotonic()
        return store

    @property
    def time_provider(self) -> TimeProvider:
        """The clock leases expire on."""
        return _alive(self._provider_ref)

    # -- release notification -----------------------------------------------------------------

    def add_release_listener(
        self, key: str, callback: Callable[[], object], owner: str | None = None
    ) -> Callable[[], None]:
        """Call `callback()` (on the releasing thread) the next time `key` is released; returns the remover.

        With `owner` (a queued waiter of a lock), only when the release hands it the turn.
        """
        with self._mutex:
            ident = next(self._listener_ids)
            self._listeners.setdefault(key, {})[ident] = (callback, owner)

        def remove() -> None:
            with self._mutex:
                listeners = self._listeners.get(key)
                if listeners is not None:
                    listeners.pop(ident, None)
                    if not listeners:
                        del self._listeners[key]

        return remove

    def _take_listeners(self, key: str, turns: Collection[str] | None = None) -> list[Callable[[], object]]:
        # Under the mutex: the callbacks to run once it is released. With `turns` (a lock's
        # queued owners whose turn came, the waiters a semaphore's freed slots serve), the other
        # queued waiters keep sleeping.
        if turns is None:
            return [callback for callback, _ in self._listeners.pop(key, {}).values()]
        listeners = self._listeners.get(key)
        if listeners is None:
            return []
        woken = [ident for ident, (_, owner) in listeners.items() if owner is None or owner in turns]
        callbacks = [listeners.pop(ident)[0] for ident in woken]
        if not listeners:
            del self._listeners[key]
        return callbacks

    @staticmethod
    def _notify(callbacks: list[Callable[[], object]]) -> None:
        for callback in callbacks:
            callback()

    # -- the waiter queues (under the mutex) ---------------------------------------------------

    def _waiting(self, key: str, now: float) -> dict[str, tuple[float, Any]] | None:
        """The key's live queue (None when nobody waits), dropping expired entries."""
        queue = _live_entries(self._queues, key, now, 0)
        if queue is None:
            self._forget_limit(key)
        return queue

    def _join(self, key: str, owner: str, now: float, *, asked: object, join: bool) -> bool:
        """Under the mutex: with `join`, a refused waiter asking `asked` joins (or keeps its place in) the queue.

        Whether it is queued. Expired entries are dropped first: waiters that are gone never
        fill the bound.
        """
        if not join:
            return False
        queue = self._waiting(key, now) or self._queues.setdefault(key, {})
        if owner in queue or len(queue) < QUEUE_BOUND:
            queue[owner] = (now + QUEUE_ENTRY, asked)
            return True
        return False

    def _leave(self, key: str, owner: str) -> bool:
        """Take `owner` out of the key's queue: whether it was queued."""
        queue = self._queues.get(key)
        if queue is None or queue.pop(owner, None) is None:
            return False
        if not queue:
            del self._queues[key]
            self._forget_limit(key)
        return True

    def _forget_limit(self, key: str) -> None:
        """Drop what is kept of a key that has neither holders nor waiters any more (a semaphore's limit)."""

    def _tables(self) -> tuple[tuple[dict[str, Any], Callable[[str, float], object]], ...]:
        """What the sweep prunes: each per-key table, with what drops a key's expired state (`(key, now)`)."""
        raise NotImplementedError

    def _sweep(self, now: float) -> None:
        """Under the mutex, amortised O(1): drop expired state once the tables doubled in size."""
        tables = self._tables()
        if sum(len(table) for table, _ in tables) < self._sweep_at:
            return
        for table, prune in tables:
            for key in list(table):
                prune(key, now)
        self._sweep_at = max(_SWEEP_FLOOR, 2 * sum(len(table) for table, _ in tables))

    def _is_free(self, key: str, owner: str | None, limit: int | None = None, permits: int = 1) -> bool:
        raise NotImplementedError

    def wait_released(
        self, key: str, timeout: float, owner: str | None = None, limit: int | None = None, permits: int = 1
    ) -> bool:
        """Block until `key` is released (True at once if it is free) or `timeout` passes (False).

        The timeout is measured on the store's time provider. With `owner` (a queued waiter),
        "free" and "released" mean: its turn has come (for a semaphore, with its `limit` and
        `permits`: the slots it asks for are free for it).
        """
        if self._is_free(key, owner, limit, permits):
            return True
        woken = threading.Event()
        remove = self.add_release_listener(key, woken.set, owner)
        try:
            if self._is_free(key, owner, limit, permits):  # pragma: no cover - released since the check
                return True
            return clock_wait(self.time_provider, woken, timeout)
        finally:
            remove()

    async def wait_released_async(
        self, key: str, timeout: float, owner: str | None = None, limit: int | None = None, permits: int = 1
    ) -> bool:
        """See `wait_released`."""
        if self._is_free(key, owner, limit, permits):
            return True
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()
        remove = self.add_release_listener(key, functools.partial(resolve_threadsafe, loop, future), owner)
        try:
            if self._is_free(key, owner, limit, permits):  # pragma: no cover - released since the check
                return True
            return await clock_wait_async(self.time_provider, future, timeout)
        finally:
            remove()

    def _renew(self, key: str, owner: str, ttl: float, now: float) -> bool:
        # Under the mutex: push `owner`'s live hold out to now + ttl; whether it held one.
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}(time_provider={self.time_provider!r})"

    def renew(self, key: str, owner: str, ttl: float) -> bool:
        """See `LockStore.renew` and `SemaphoreStore.renew`; never re-acquires an expired hold.

        The lock store renews a shared holder's hold too.
        """
        ttl = _round_ttl(ttl)
        with self._mutex:
            return self._renew(key, owner, ttl, self._now())

    renew_async = inline_twin(renew)

    def renew_many(self, items: Sequence[tuple[str, str, float]]) -> list[bool | Exception]:
        """`renew` each `(key, owner, ttl)` under one hold of the store's lock (`SupportsRenewMany`)."""
        with self._mutex:
            now = self._now()
            return [self._renew(key, owner, _round_ttl(ttl), now) for key, owner, ttl in items]


class MemoryLockStore(_MemoryStore):
    """An in-process `LockStore`/`AsyncLockStore` with lease info, release notification and shared holds.

    It excludes executions within one process only (use a Redis store across processes).
    `time_provider` (default: the system clock) is the clock leases expire on; a pipeline
    refuses a memory store whose clock is not its own. Waiters queue fairly, as in
    `RedisLockStore`: a free lock goes to the longest-waiting live waiter (`acquire_or_queue`).
    Keys can also be held shared (`SupportsSharedHolds`): waiters of both modes share the key's
    one queue, and the shared requests at its head are granted together.
    """

    capabilities = replace(_MemoryStore.capabilities, kind="lock")

    def __init__(self, time_provider: TimeProvider | None = None) -> None:
        super().__init__(time_provider)
        self._leases: dict[str, tuple[str, int, float]] = {}  # key -> (owner, token, expires): exclusive
        self._shared: dict[str, dict[str, tuple[int, float]]] = {}  # key -> owner -> (token, expires)
        # key -> waiting owner -> (entry expiry, shared?), FIFO
        self._queues: dict[str, dict[str, tuple[float, bool]]] = {}

    def __len__(self) -> int:
        """How many keys hold state (live leases, and expired ones not yet swept)."""
        return len(self._leases) + len(self._shared)

    def _live(self, key: str, now: float) -> tuple[str, int, float] | None:
        # Under the mutex: the key's live exclusive lease, dropping an expired one.
        lease = self._leases.get(key)
        if lease is not None and lease[2] <= now:
            del self._leases[key]
            return None
        return lease

    def _readers(self, key: str, now: float) -> dict[str, tuple[int, float]] | None:
        # Under the mutex: the key's live shared holders (None when none), dropping expired ones.
        return _live_entries(self._shared, key, now, 1)

    def _turns(self, key: str, now: float, queue: dict[str, tuple[float, bool]]) -> list[str]:
        """Under the mutex: the queued owners whose turn has come (the key has no exclusive holder).

        An exclusive request at the head, when nothing is held; else the shared requests at the
        head, together.
        """
        turns: list[str] = []
        for owner, (_, shared) in queue.items():
            if not shared:  # an exclusive request: its turn comes at the head, when nothing is held
                return turns or ([owner] if self._readers(key, now) is None else [])
            turns.append(owner)
        return turns

    def _tables(self) -> tuple[tuple[dict[str, Any], Callable[[str, float], object]], ...]:
        return (self._leases, self._live), (self._shared, self._readers), (self._queues, self._waiting)

    def _is_free(self, key: str, owner: str | None, limit: int | None = None, permits: int = 1) -> bool:  # noqa: ARG002
        # "Free": nobody holds the key (for `owner`: it holds it, or its turn in the queue has come).
        with self._mutex:
            now = self._now()
            lease = self._live(key, now)
            if lease is not None:
                return lease[0] == owner
            readers = self._readers(key, now)
            if readers is not None and owner in readers:
                return True
            queue = self._waiting(key, now)
            if queue is None:
                return readers is None
            return owner in queue and owner in self._turns(key, now, queue)

    def _acquire(
        self, key: str, owner: str, ttl: float, *, join: bool, shared: bool = False
    ) -> tuple[int | None, float | None]:
        ttl = _ROUNDED.get(ttl) or _round_ttl(ttl)  # every rounded ttl is >= 1 ms: truthy
        with self._mutex:
            now = self._now()
            lease = self._live(key, now)
            if lease is None and key not in self._queues and key not in self._shared:
                # The common case of each mode: free, nobody waits (the sweep's check inline).
                if len(self._leases) + len(self._shared) + len(self._queues) >= self._sweep_at:
                    self._sweep(now)
                token = next(self._tokens)
                if shared:
                    self._shared[key] = {owner: (token, now + ttl)}
                else:
                    self._leases[key] = (owner, token, now + ttl)
                return token, None
            if lease is not None:
                if lease[0] != owner or shared:
                    self._join(key, owner, now, asked=shared, join=join)
                    return None, lease[2] - now
                token = lease[1]
            elif shared:
                return self._acquire_shared(key, owner, now, ttl, join=join)
            else:
                readers = self._readers(key, now)
                queue = self._waiting(key, now)
                if readers is not None or (queue is not None and next(iter(queue)) != owner):
                    self._join(key, owner, now, asked=False, join=join)
                    if readers is None:
                        return None, None
                    return None, max(expires for _, expires in readers.values()) - now
                self._leave(key, owner)
                self._sweep(now)
                token = next(self._tokens)
            self._leases[key] = (owner, token, now + ttl)
            return token, None

    def _acquire_shared(self, key: str, owner: str, now: float, ttl: float, *, join: bool) -> tuple[int | None, None]:
        # Under the mutex, no exclusive lease held: granted unless an exclusive request waits ahead.
        readers = self._readers(key, now)
        if readers is not None and owner in readers:
            token = readers[owner][0]
        else:
            queue = self._waiting(key, now)
            if queue is not None:
                for waiting, (_, shared) in queue.items():
                    if waiting == owner:
                        break
                    if not shared:  # an exclusive request waits ahead: readers never starve a writer
                        self._join(key, owner, now, asked=True, join=join)
                        return None, None
                self._leave(key, owner)
            self._sweep(now)
            token = next(self._tokens)
            readers = self._shared.setdefault(key, {})
        readers[owner] = (token, now + ttl)
        return token, None

    def acquire_or_ttl(
        self, key: str, owner: str, ttl: float, *, shared: bool = False
    ) -> tuple[int | None, float | None]:
        """`(token, None)` when acquired (or already ours); `(None, holder's time left)` when held.

        A free lock that waiters queue for goes to the first of them: anyone else is refused
        (with no time left to report). With `shared`, a shared hold (`acquire_shared`).
        """
        return self._acquire(key, owner, ttl, join=False, shared=shared)

    def acquire_or_queue(
        self, key: str, owner: str, ttl: float, *, shared: bool = False
    ) -> tuple[int | None, float | None]:
        """`acquire_or_ttl` for a caller that will wait: refused, `owner` joins the key's FIFO queue.

        The entry lives `QUEUE_ENTRY` seconds unless `owner` tries again; `release(key, owner)`
        by a waiter that gives up leaves the queue.
        """
        return self._acquire(key, owner, ttl, join=True, shared=shared)

    def acquire(self, key: str, owner: str, ttl: float) -> int | None:
        """See `LockStore.acquire` (an owner that holds the key gets its token and a fresh ttl)."""
        return self._acquire(key, owner, ttl, join=False)[0]

    def acquire_shared(self, key: str, owner: str, ttl: float) -> int | None:
        """See `SupportsSharedHolds.acquire_shared`: refused while an exclusive lease is held or waits first."""
        return self._acquire(key, owner, ttl, join=False, shared=True)[0]

    def _renew(self, key: str, owner: str, ttl: float | None, now: float) -> bool:
        # Under the mutex: push `owner`'s live hold (either mode) out to now + ttl, or end it
        # (`ttl` None: a release); whether it held one.
        lease = self._live(key, now)
        if lease is not None:
            if lease[0] != owner:
                return False
            if ttl is None:
                del self._leases[key]
            else:
                self._leases[key] = (owner, lease[1], now + ttl)
            return True
        readers = self._readers(key, now)
        if readers is None or owner not in readers:
            return False
        if ttl is not None:
            readers[owner] = (readers[owner][0], now + ttl)
        elif len(readers) > 1:
            del readers[owner]
        else:
            del self._shared[key]
        return True

    def release(self, key: str, owner: str) -> bool:
        """See `LockStore.release` (a shared holder's too); wakes the waiters whose turn came.

        A waiter that does not hold the lock leaves the queue instead (False); the turn may pass
        on. With nobody queued, every listener is woken.
        """
        with self._mutex:
            now = self._now()
            lease = self._leases.get(key)
            if lease is not None and lease[0] == owner and lease[2] > now:  # the common case, inline
                del self._leases[key]
                released = True
            else:
                released = self._renew(key, owner, None, now)
            if not released and not self._leave(key, owner):
                return False
            if key not in self._listeners:  # the common case: nobody waits
                return released
            callbacks = self._wake(key, now, anyone=released)
        self._notify(callbacks)
        return released

    def _wake(self, key: str, now: float, *, anyone: bool) -> list[Callable[[], object]]:
        # Under the mutex: the listeners to call after a change of `key` (see `release`).
        queue = self._waiting(key, now)
        if queue is None:
            return self._take_listeners(key)
        turns = [] if self._live(key, now) is not None else self._turns(key, now, queue)
        if not turns and not anyone:
            return []
        return self._take_listeners(key, turns)

    def info(self, key: str) -> LockInfo | None:
        """`key`'s holders (by token) and its queue's length, or None when it is free (`SupportsInspection`).

        The mode is "exclusive" for a lock holder, "shared" for shared holders (every one listed).
        """
        with self._mutex:
            now = self._now()
            lease = self._live(key, now)
            if lease is not None:
                holders = [HolderInfo(lease[0], lease[1], lease[2] - now)]
            elif (readers := self._readers(key, now)) is not None:
                holders = [HolderInfo(owner, token, expires - now) for owner, (token, expires) in readers.items()]
            else:
                return None
            waiters = len(self._waiting(key, now) or ())
        holders.sort(key=lambda holder: holder.token)
        return LockInfo(key, lock_mode(shared=lease is None), tuple(holders), waiters)

    def force_release(self, key: str) -> bool:
        """Free `key` whoever holds it (every shared holder too): True if it was held, False if it was free.

        The holders are not interrupted: their next renewal answers False and they learn of the
        loss as after an expiry (the way to test a lost lease on a fake clock, where renewals
        keep a lease alive however far the clock moves: docs/testing.md). Waiters are woken as
        by a release.
        """
        with self._mutex:
            now = self._now()
            held = self._live(key, now) is not None or self._readers(key, now) is not None
            self._leases.pop(key, None)
            self._shared.pop(key, None)
            callbacks = self._wake(key, now, anyone=True) if held and key in self._listeners else []
        self._notify(callbacks)
        return held

    acquire_async = inline_twin(acquire)
    acquire_shared_async = inline_twin(acquire_shared)
    acquire_or_ttl_async = inline_twin(acquire_or_ttl)
    acquire_or_queue_async = inline_twin(acquire_or_queue)
    release_async = inline_twin(release)
    info_async = inline_twin(info)
    force_release_async = inline_twin(force_release)


class MemorySemaphoreStore(_MemoryStore, HoldersFromInfo):
    """An in-process `SemaphoreStore`/`AsyncSemaphoreStore`: up to `limit` slots per key.

    Each holder gets its own token and takes `permits` slots at once, all or none
    (`SupportsPermits`). `acquire_or_ttl` takes the limit as a fourth argument and reports,
    when full, the time left until the first holder's lease expires. Waiters queue fairly, as
    in `RedisSemaphoreStore`: free slots go to the live waiters in arrival order, a request
    that does not fit is not overtaken by later ones (`acquire_or_queue`), and a release wakes
    only the waiters the freed slots now serve.
    """

    # Its `acquire_or_ttl` takes the limit too.
    capabilities = replace(_MemoryStore.capabilities, kind="semaphore", lease_info_takes_limit=True)

    def __init__(self, time_provider: TimeProvider | None = None) -> None:
        super().__init__(time_provider)
        # key -> owner -> (token, expires, permits)
        self._holders: dict[str, dict[str, tuple[int, float, int]]] = {}
        # key -> waiting owner -> (entry expiry, permits asked), FIFO
        self._queues: dict[str, dict[str, tuple[float, int]]] = {}
        self._limits: dict[str, int] = {}  # key -> the limit of its latest grant (what a release wakes for)

    def __len__(self) -> int:
        """How many keys hold state."""
        return len(self._holders)

    def _live(self, key: str, now: float) -> dict[str, tuple[int, float, int]] | None:
        # Under the mutex: the key's live holders (None when none), dropping expired ones.
        holders = _live_entries(self._holders, key, now, 1)
        if holders is None:
            self._forget_limit(key)
        return holders

    def _forget_limit(self, key: str) -> None:
        # Under the mutex: a key with neither holders nor waiters keeps no state.
        if key not in self._holders and key not in self._queues:
            self._limits.pop(key, None)

    @staticmethod
    def _held(holders: dict[str, tuple[int, float, int]] | None) -> int:
        return 0 if holders is None else sum(permits for _, _, permits in holders.values())

    def _may_take(self, key: str, owner: str, permits: int, free: int, now: float) -> bool:
        # Under the mutex: whether `owner` may take `permits` of `free` free slots: when it and
        # every live waiter ahead of it fit in them (first come, first served: a request that
        # does not fit holds back the ones behind it), or, outside the queue, when the whole
        # queue and it fit.
        queue = self._waiting(key, now) or {}
        for waiter, (_, asked) in queue.items():
            if waiter == owner:
                break
            permits += asked  # the waiters ahead ask for theirs first
        return permits <= free

    def _served(self, key: str, free: int, already: int, now: float) -> set[str]:
        # Under the mutex: the queued waiters that `free` slots serve (in order, until one does
        # not fit) and that `already` free slots did not: the ones a release wakes.
        queue = self._waiting(key, now)
        turns: set[str] = set()
        if queue is None:
            return turns
        wanted = 0
        for waiter, (_, asked) in queue.items():
            wanted += asked
            if wanted > free:
                break
            if wanted > already:
                turns.add(waiter)
        return turns

    def _tables(self) -> tuple[tuple[dict[str, Any], Callable[[str, float], object]], ...]:
        return (self._holders, self._live), (self._queues, self._waiting)

    def _is_free(self, key: str, owner: str | None, limit: int | None = None, permits: int = 1) -> bool:
        # "Free" for a waiter: no holder at all; for a queued waiter with the limit, slots it
        # may take now.
        with self._mutex:
            now = self._now()
            holders = self._live(key, now)
            if owner is not None and holders is not None and owner in holders:
                return True
            if owner is None or limit is None:
                return holders is None
            return self._may_take(key, owner, permits, limit - self._held(holders), now)

    def _acquire(
        self, key: str, owner: str, ttl: float, limit: int, permits: int, *, join: bool
    ) -> tuple[int | None, float | None]:
        ttl = _round_ttl(ttl)
        check_semaphore_permits(limit, permits)
        with self._mutex:
            now = self._now()
            holders = self._live(key, now)
            if holders is not None and owner in holders:
                token, _, permits = holders[owner]
            else:
                free = limit - self._held(holders)
                if permits > free or (key in self._queues and not self._may_take(key, owner, permits, free, now)):
                    if self._join(key, owner, now, asked=permits, join=join):
                        self._limits[key] = limit
                    if permits <= free or holders is None:
                        return None, None  # the slots are free, but promised to waiters ahead
                    return None, min(expires for _, expires, _ in holders.values()) - now
                self._leave(key, owner)
                if holders is None:
                    self._sweep(now)
                    holders = self._holders[key] = {}
                token = next(self._tokens)
            holders[owner] = (token, now + ttl, permits)
            self._limits[key] = limit
            return token, None

    def acquire_or_ttl(
        self, key: str, owner: str, ttl: float, limit: int = 1, permits: int = 1
    ) -> tuple[int | None, float | None]:
        """`(token, None)` when the slots were taken (or are already ours); `(None, time to first expiry)`.

        Slots that waiters queue for go to the first of them: anyone else is refused (with
        no time to report, `(None, None)`).
        """
        return self._acquire(key, owner, ttl, limit, permits, join=False)

    def acquire_or_queue(
        self, key: str, owner: str, ttl: float, limit: int = 1, permits: int = 1
    ) -> tuple[int | None, float | None]:
        """`acquire_or_ttl` for a caller that will wait: refused, `owner` joins the key's FIFO queue.

        Free slots go to the live entries in arrival order while they fit (or to anyone when
        the whole queue fits too). The entry lives `QUEUE_ENTRY` seconds unless `owner` tries
        again; `release(key, owner)` by a waiter that gives up leaves the queue.
        """
        return self._acquire(key, owner, ttl, limit, permits, join=True)

    def acquire(self, key: str, owner: str, ttl: float, limit: int, permits: int = 1) -> int | None:
        """See `SemaphoreStore.acquire` and `SupportsPermits`."""
        return self._acquire(key, owner, ttl, limit, permits, join=False)[0]

    def _renew(self, key: str, owner: str, ttl: float, now: float) -> bool:
        # Under the mutex: push `owner`'s live slots out to now + ttl.
        holders = self._live(key, now)
        if holders is None or owner not in holders:
            return False
        token, _, permits = holders[owner]
        holders[owner] = (token, now + ttl, permits)
        return True

    def release(self, key: str, owner: str) -> bool:
        """See `SemaphoreStore.release`; wakes only the queued waiters the freed slots serve.

        A waiter that holds no slot leaves the queue instead (False), and the waiters that
        may now take free slots are woken.
        """
        with self._mutex:
            now = self._now()
            recorded = self._held(self._holders.get(key))
            holders = self._live(key, now)
            pruned = recorded - self._held(holders)  # slots of lapsed holders: nobody announced them
            limit = self._limits.get(key, 0)
            freed = 0 if holders is None or owner not in holders else holders.pop(owner)[2]  # 0: not a holder
            if freed:
                if not holders:
                    del self._holders[key]
                self._forget_limit(key)
            elif not self._leave(key, owner):
                return False
            if key not in self._listeners:  # the common case: nobody waits
                return freed > 0
            free = limit - self._held(holders)
            # Woken: the waiters the free slots serve that the slots free before did not; after
            # a waiter left instead, the queue moved up: every waiter the free slots serve.
            already = free - freed - pruned if freed else 0
            callbacks = self._take_listeners(key, self._served(key, free, already, now))
        self._notify(callbacks)
        return freed > 0

    def info(self, key: str) -> LockInfo | None:
        """`key`'s live holders (by token) and the length of its waiter queue, or None when none holds it."""
        with self._mutex:
            now = self._now()
            holders = self._live(key, now)
            if holders is None:
                return None
            found = [
                HolderInfo(owner, token, expires - now, permits) for owner, (token, expires, permits) in holders.items()
            ]
            waiters = len(self._waiting(key, now) or ())
        found.sort(key=lambda holder: holder.token)
        return LockInfo(key, "semaphore", tuple(found), waiters)

    def force_release(self, key: str) -> bool:
        """Free every slot of `key`: True if any was held. Each holder's next renewal answers False."""
        with self._mutex:
            if self._live(key, self._now()) is None:
                return False
            del self._holders[key]
            callbacks = self._take_listeners(key)
        self._notify(callbacks)
        return True

    acquire_async = inline_twin(acquire)
    acquire_or_ttl_async = inline_twin(acquire_or_ttl)
    acquire_or_queue_async = inline_twin(acquire_or_queue)
    release_async = inline_twin(release)
    info_async = inline_twin(info)
    force_release_async = inline_twin(force_release)
    holders_async = inline_twin(HoldersFromInfo.holders)


_SYSTEM_STORE = MemoryLockStore(SYSTEM_TIME)
_BY_CLOCK: weakref.WeakKeyDictionary[TimeProvider, MemoryLockStore] = weakref.WeakKeyDictionary()
_BY_UNWEAKABLE_CLOCK: dict[int, MemoryLockStore] = {}
_REGISTRY_LOCK = threading.Lock()


def default_lock_store(time_provider: TimeProvider) -> MemoryLockStore:
    """The one `MemoryLockStore` of a clock, shared by every lock strategy built on it.

    Weakly keyed by the clock (a fake clock and its store go away together); the system clock
    is a module singleton, and so is its store. A clock that cannot be weakly referenced (a
    custom slotted class) keeps its store for the life of the process.
    """
    if time_provider is SYSTEM_TIME:
        return _SYSTEM_STORE
    with _REGISTRY_LOCK:
        try:
            store = _BY_CLOCK.get(time_provider)
            if store is None:
                store = _BY_CLOCK[time_provider] = MemoryLockStore._weakly(time_provider)
        except TypeError:  # the store holds its clock: the clock's id stays its own
            store = _BY_UNWEAKABLE_CLOCK.get(id(time_provider))
            if store is None:
                store = _BY_UNWEAKABLE_CLOCK[id(time_provider)] = MemoryLockStore(time_provider)
        return store
