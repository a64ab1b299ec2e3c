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
import contextlib
import itertools
import math
import threading
import weakref
from typing import TYPE_CHECKING, Self

from resilience._time import SYSTEM_TIME, lease_clock

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

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
    """A ttl rounded up to whole milliseconds (at least one)."""
    return max(1, math.ceil(round(ttl * 1000, 6))) / 1000


def _live_queue(queues: dict[str, dict[str, float]], key: str, now: float) -> dict[str, float] | None:
    """`key`'s queue of waiting owners (FIFO, owner -> entry expiry) without its expired entries.

    None when nobody waits. The caller holds the store's mutex; a queue that lost entries is
    replaced (dictionaries keep the arrival order), an emptied one removed.
    """
    queue = queues.get(key)
    if queue is None:
        return None
    if any(expires <= now for expires in queue.values()):
        queue = {owner: expires for owner, expires in queue.items() if expires > now}
        if not queue:
            del queues[key]
            return None
        queues[key] = queue
    return queue


class _MemoryStore:
    """What both memory stores share: the clock, the token counter, waiters and the sweep."""

    _lease_info_takes_limit = False
    _answers_inline = True
    """Its async methods never suspend, so the engine may call the sync ones instead."""
    _renews_on_timer = True
    """Its `renew_many` is a few dict updates under its lock: the sync runtime may run a batch
    on its timer thread. Not a subclass's own renewal code, which could block every lease."""

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        # A subclass that overrides an async method may suspend there (a test double does).
        if cls.__module__ != __name__ and any(name.endswith("_async") for name in vars(cls)):
            cls._answers_inline = False
        if cls.__module__ != __name__ and "renew" in vars(cls) and "renew_many" not in vars(cls):
            cls.renew_many = None  # type: ignore[assignment] # not offered: the engine calls its `renew` for each
        if cls.__module__ != __name__ and "renew_many" in vars(cls):
            cls._renews_on_timer = False

    def __init__(self, time_provider: TimeProvider | None = None) -> None:
        provider = time_provider or SYSTEM_TIME
        self._provider_ref: Callable[[], TimeProvider | None] = lambda: provider
        # Read twice per lease (acquire, release): a bound method, not the property. Leases
        # expire on the clock the lease runtime reads (`lease_clock`: the real one for the
        # system clock, which a freezegun freeze does not move).
        self._now: Callable[[], float] = lease_clock(provider).monotonic
        self._mutex = threading.Lock()
        self._counter = 0
        # key -> id -> (callback, the queued owner it waits for, None for any release)
        self._listeners: dict[str, dict[int, tuple[Callable[[], object], str | None]]] = {}
        self._listener_ids = 0
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
    def _time_provider(self) -> TimeProvider:
        return _alive(self._provider_ref)

    @property
    def time_provider(self) -> TimeProvider:
        """The clock leases expire on."""
        return self._time_provider

    def _next_token(self) -> int:
        self._counter += 1
        return self._counter

    # -- release notification -----------------------------------------------------------------

    def add_release_listener(
        self, key: str, callback: Callable[[], object], owner: str | None = None
    ) -> Callable[[], None]:
        """Call `callback()` (on the releasing thread) the next time `key` is released; returns the remover.

        With `owner` (a queued waiter of a lock), only when the release hands it the turn.
        """
        with self._mutex:
            self._listener_ids += 1
            ident = self._listener_ids
            self._listeners.setdefault(key, {})[ident] = (callback, owner)

        def remove() -> None:
            with self._mutex:
                listeners = self._listeners.get(key)
                if listeners is not None:
                    listeners.pop(ident, None)
                    if not listeners:
                        del self._listeners[key]

        return remove

    def _take_listeners(self, key: str, turn: str | None = None) -> list[Callable[[], object]]:
        # Under the mutex: the callbacks to run once it is released. With `turn` (the head of
        # a lock's queue), the other queued waiters keep sleeping.
        listeners = self._listeners.get(key)
        if listeners is None:
            return []
        if turn is None:
            del self._listeners[key]
            return [callback for callback, _ in listeners.values()]
        woken = [ident for ident, (_, owner) in listeners.items() if owner is None or owner == turn]
        callbacks = [listeners.pop(ident)[0] for ident in woken]
        if not listeners:
            del self._listeners[key]
        return callbacks

    @staticmethod
    def _notify(callbacks: list[Callable[[], object]]) -> None:
        for callback in callbacks:
            callback()

    def _is_free(self, key: str, owner: str | None, limit: int | None = None) -> bool:
        raise NotImplementedError

    def wait_released(self, key: str, timeout: float, owner: str | None = None, limit: int | None = None) -> bool:
        """Block until `key` is released (True at once if it is free) or `timeout` passes (False).

        The timeout is measured on the store's time provider. With `owner` (a queued waiter),
        "free" and "released" mean: its turn has come (for a semaphore, with its `limit`: a
        slot is free for it).
        """
        if self._is_free(key, owner, limit):
            return True
        woken = threading.Event()
        remove = self.add_release_listener(key, woken.set, owner)
        try:
            if self._is_free(key, owner, limit):  # pragma: no cover - released between the check and the subscription
                return True
            return self._time_provider.wait(woken, timeout)
        finally:
            remove()

    async def wait_released_async(
        self, key: str, timeout: float, owner: str | None = None, limit: int | None = None
    ) -> bool:
        """See `wait_released`."""
        if self._is_free(key, owner, limit):
            return True
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()

        def settle() -> None:
            if not future.done():
                future.set_result(None)

        def on_release() -> None:
            with contextlib.suppress(RuntimeError):  # the loop closed: nobody waits any more
                loop.call_soon_threadsafe(settle)

        remove = self.add_release_listener(key, on_release, owner)
        try:
            if self._is_free(key, owner, limit):  # pragma: no cover - released between the check and the subscription
                return True
            return await self._time_provider.wait_async(future, timeout)
        finally:
            remove()

    def renew(self, key: str, owner: str, ttl: float) -> bool:
        raise NotImplementedError

    def renew_many(self, items: Sequence[tuple[str, str, float]]) -> list[bool | Exception]:
        """`renew` each `(key, owner, ttl)` (`SupportsRenewMany`: the lease runtime's batches)."""
        return [self.renew(key, owner, ttl) for key, owner, ttl in items]  # the semaphore store's


class MemoryLockStore(_MemoryStore):
    """An in-process `LockStore`/`AsyncLockStore` with lease info and release notification.

    It excludes executions within one process only (use a Redis store across processes).
    `time_provider` (default: the system clock) is the clock leases expire on; a pipeline
    refuses a memory store whose clock is not its own. Waiters queue fairly, as in
    `RedisLockStore`: a free lock goes to the longest-waiting live waiter (`acquire_or_queue`).
    """

    _fair_queue = True
    """Waiters queue in the store (`acquire_or_queue`); the lease engine looks for this flag."""

    def __init__(self, time_provider: TimeProvider | None = None) -> None:
        super().__init__(time_provider)
        self._leases: dict[str, tuple[str, int, float]] = {}  # key -> (owner, token, expires)
        self._queues: dict[str, dict[str, float]] = {}  # key -> waiting owner -> entry expiry, FIFO

    def __len__(self) -> int:
        """How many keys hold state (live leases, and expired ones not yet swept)."""
        return len(self._leases)

    def _live(self, key: str, now: float) -> tuple[str, int, float] | None:
        # Under the mutex: the key's live lease, dropping an expired one.
        lease = self._leases.get(key)
        if lease is not None and lease[2] <= now:
            del self._leases[key]
            return None
        return lease

    def _head(self, key: str, now: float) -> str | None:
        # Under the mutex: the live head of the key's queue, dropping expired entries.
        queue = _live_queue(self._queues, key, now)
        return None if queue is None else next(iter(queue))

    def _leave(self, key: str, owner: str) -> None:
        queue = self._queues.get(key)
        if queue is not None and queue.pop(owner, None) is not None and not queue:
            del self._queues[key]

    def _sweep(self, now: float) -> None:
        # Under the mutex, amortised O(1): drop expired leases once the table doubled.
        if len(self._leases) + len(self._queues) < self._sweep_at:
            return
        self._leases = {key: lease for key, lease in self._leases.items() if lease[2] > now}
        for key in list(self._queues):
            self._head(key, now)
        self._sweep_at = max(_SWEEP_FLOOR, 2 * (len(self._leases) + len(self._queues)))

    def _is_free(self, key: str, owner: str | None, limit: int | None = None) -> bool:  # noqa: ARG002
        with self._mutex:
            now = self._now()
            lease = self._live(key, now)
            if lease is not None:
                return lease[0] == owner
            head = self._head(key, now)
        return head is None or head == owner

    def _acquire(self, key: str, owner: str, ttl: float, *, join: bool) -> tuple[int | None, float | None]:
        ttl = _round_ttl(ttl)
        with self._mutex:
            now = self._now()
            lease = self._live(key, now)
            if lease is None and key not in self._queues:  # the common case: free, nobody waits
                self._sweep(now)
                token = self._next_token()
            elif lease is not None and lease[0] == owner:
                token = lease[1]
            else:
                head = None if lease is not None else self._head(key, now)
                if lease is not None or (head is not None and head != owner):
                    if join:
                        queue = self._queues.setdefault(key, {})
                        if owner in queue or len(queue) < QUEUE_BOUND:
                            queue[owner] = now + QUEUE_ENTRY
                    return None, None if lease is None else lease[2] - now
                if head is not None:
                    self._leave(key, owner)
                self._sweep(now)
                token = self._next_token()
            self._leases[key] = (owner, token, now + ttl)
            return token, None

    def acquire_or_ttl(self, key: str, owner: str, ttl: float) -> tuple[int | None, float | None]:
        """`(token, None)` when acquired (or already ours); `(None, holder's time left)` when held.

        A free lock that waiters queue for goes to the first of them: anyone else is refused
        (with no time left to report).
        """
        return self._acquire(key, owner, ttl, join=False)

    def acquire_or_queue(self, key: str, owner: str, ttl: float) -> tuple[int | None, float | None]:
        """`acquire_or_ttl` for a caller that will wait: refused, `owner` joins the key's FIFO queue.

        The entry lives `QUEUE_ENTRY` seconds unless `owner` tries again; `release(key, owner)`
        by a waiter that gives up leaves the queue.
        """
        return self._acquire(key, owner, ttl, join=True)

    def acquire(self, key: str, owner: str, ttl: float) -> int | None:
        """See `LockStore.acquire` (an owner that holds the key gets its token and a fresh ttl)."""
        return self._acquire(key, owner, ttl, join=False)[0]

    def renew(self, key: str, owner: str, ttl: float) -> bool:
        """See `LockStore.renew`; never re-acquires an expired lease."""
        ttl = _round_ttl(ttl)
        with self._mutex:
            now = self._now()
            lease = self._live(key, now)
            if lease is None or lease[0] != owner:
                return False
            self._leases[key] = (owner, lease[1], now + ttl)
            return True

    def renew_many(self, items: Sequence[tuple[str, str, float]]) -> list[bool | Exception]:
        """`renew` each `(key, owner, ttl)` under one hold of the store's lock (`SupportsRenewMany`)."""
        answers: list[bool | Exception] = []
        rounded: dict[float, float] = {}
        with self._mutex:
            now = self._now()
            for key, owner, ttl in items:
                lease = self._live(key, now)
                if lease is None or lease[0] != owner:
                    answers.append(False)
                    continue
                ms = rounded.get(ttl)
                if ms is None:
                    ms = rounded[ttl] = _round_ttl(ttl)
                self._leases[key] = (owner, lease[1], now + ms)
                answers.append(True)
        return answers

    def release(self, key: str, owner: str) -> bool:
        """See `LockStore.release`; wakes the head of the key's queue (or every waiter if none queues).

        A waiter that does not hold the lock leaves the queue instead (False); if it was the
        head of a free lock, the turn passes on.
        """
        with self._mutex:
            now = self._now()
            lease = self._live(key, now)
            if lease is None or lease[0] != owner:
                was_head = lease is None and self._head(key, now) == owner
                self._leave(key, owner)
                if not was_head:
                    return False
                released = False
            else:
                del self._leases[key]
                released = True
            if key not in self._listeners:  # the common case: nobody waits
                return released
            callbacks = self._take_listeners(key, self._head(key, now))
        self._notify(callbacks)
        return released

    def force_release(self, key: str) -> bool:
        """Free `key` whoever holds it: True if it was held, False if it was free.

        The holder is not interrupted: its next renewal answers False and it learns of the loss
        as after an expiry (the way to test a lost lease on a fake clock, where renewals keep a
        lease alive however far the clock moves: docs/testing.md). Waiters are woken as by a
        release.
        """
        with self._mutex:
            lease = self._live(key, self._now())
        return lease is not None and self.release(key, lease[0])

    async def acquire_or_ttl_async(self, key: str, owner: str, ttl: float) -> tuple[int | None, float | None]:
        """See `acquire_or_ttl`."""
        return self._acquire(key, owner, ttl, join=False)

    async def acquire_or_queue_async(self, key: str, owner: str, ttl: float) -> tuple[int | None, float | None]:
        """See `acquire_or_queue`."""
        return self._acquire(key, owner, ttl, join=True)

    async def acquire_async(self, key: str, owner: str, ttl: float) -> int | None:
        """See `acquire`."""
        return self._acquire(key, owner, ttl, join=False)[0]

    async def renew_async(self, key: str, owner: str, ttl: float) -> bool:
        """See `renew`."""
        return self.renew(key, owner, ttl)

    async def release_async(self, key: str, owner: str) -> bool:
        """See `release`."""
        return self.release(key, owner)

    def __repr__(self) -> str:
        return f"MemoryLockStore(time_provider={self._time_provider!r})"


class MemorySemaphoreStore(_MemoryStore):
    """An in-process `SemaphoreStore`/`AsyncSemaphoreStore`: up to `limit` holders per key.

    Each holder gets its own token. `acquire_or_ttl` takes the limit as a fourth argument and
    reports, when full, the time left until the first holder's lease expires. Waiters queue
    fairly, as in `RedisSemaphoreStore`: a free slot goes only to one of the first
    (limit - holders) live waiters (`acquire_or_queue`).
    """

    _lease_info_takes_limit = True
    _fair_queue = True
    """Waiters queue in the store (`acquire_or_queue`); the lease engine looks for this flag."""

    def __init__(self, time_provider: TimeProvider | None = None) -> None:
        super().__init__(time_provider)
        self._holders: dict[str, dict[str, tuple[int, float]]] = {}  # key -> owner -> (token, expires)
        self._queues: dict[str, dict[str, float]] = {}  # key -> waiting owner -> entry expiry, FIFO

    def __len__(self) -> int:
        """How many keys hold state."""
        return len(self._holders)

    def _live(self, key: str, now: float) -> dict[str, tuple[int, float]] | None:
        holders = self._holders.get(key)
        if holders is None:
            return None
        expired = [owner for owner, (_, expires) in holders.items() if expires <= now]
        for owner in expired:
            del holders[owner]
        if not holders:
            del self._holders[key]
            return None
        return holders

    def _waiting(self, key: str, now: float) -> dict[str, float] | None:
        # Under the mutex: the key's live queue (None when nobody waits), dropping expired entries.
        return _live_queue(self._queues, key, now)

    def _may_take(self, key: str, owner: str, free: int, now: float) -> bool:
        # Under the mutex: whether `owner` may take one of `free` (> 0) free slots: when it is
        # among the first `free` live waiters, or, outside the queue, when fewer than `free` wait.
        queue = self._waiting(key, now)
        if queue is None:
            return True
        if owner in queue:
            return owner in itertools.islice(queue, free)
        return len(queue) < free

    def _leave(self, key: str, owner: str) -> bool:
        queue = self._queues.get(key)
        if queue is None or queue.pop(owner, None) is None:
            return False
        if not queue:
            del self._queues[key]
        return True

    def _sweep(self, now: float) -> None:
        if len(self._holders) + len(self._queues) < self._sweep_at:
            return
        for key in list(self._holders):
            self._live(key, now)
        for key in list(self._queues):
            self._waiting(key, now)
        self._sweep_at = max(_SWEEP_FLOOR, 2 * (len(self._holders) + len(self._queues)))

    def _is_free(self, key: str, owner: str | None, limit: int | None = None) -> bool:
        # "Free" for a waiter: no holder at all; for a queued waiter with the limit, a slot it
        # may take. Every slot freed notifies (see `release`), which is what a semaphore waiter needs.
        with self._mutex:
            now = self._now()
            holders = self._live(key, now)
            if owner is not None and holders is not None and owner in holders:
                return True
            if owner is None or limit is None:
                return holders is None
            free = limit - (0 if holders is None else len(holders))
            return free > 0 and self._may_take(key, owner, free, now)

    def _acquire(self, key: str, owner: str, ttl: float, limit: int, *, join: bool) -> tuple[int | None, float | None]:
        ttl = _round_ttl(ttl)
        with self._mutex:
            now = self._now()
            holders = self._live(key, now)
            if holders is not None and owner in holders:
                token = holders[owner][0]
            else:
                free = limit - (0 if holders is None else len(holders))
                if free <= 0 or (key in self._queues and not self._may_take(key, owner, free, now)):
                    if join:  # expired entries dropped first: waiters that are gone never fill the bound
                        queue = self._waiting(key, now) or self._queues.setdefault(key, {})
                        if owner in queue or len(queue) < QUEUE_BOUND:
                            queue[owner] = now + QUEUE_ENTRY
                    if free > 0 or holders is None:
                        return None, None  # a slot is free, but promised to waiters ahead
                    return None, min(expires for _, expires in holders.values()) - now
                if key in self._queues:
                    self._leave(key, owner)
                if holders is None:
                    self._sweep(now)
                    holders = self._holders[key] = {}
                token = self._next_token()
            holders[owner] = (token, now + ttl)
            return token, None

    def acquire_or_ttl(self, key: str, owner: str, ttl: float, limit: int = 1) -> tuple[int | None, float | None]:
        """`(token, None)` when a slot was taken (or is already ours); `(None, time to first expiry)`.

        A slot that waiters queue for goes to the first of them: anyone else is refused (with
        no time to report, `(None, None)`).
        """
        return self._acquire(key, owner, ttl, limit, join=False)

    def acquire_or_queue(self, key: str, owner: str, ttl: float, limit: int = 1) -> tuple[int | None, float | None]:
        """`acquire_or_ttl` for a caller that will wait: refused, `owner` joins the key's FIFO queue.

        A free slot goes only to a waiter among the first (limit - holders) live entries (or to
        anyone while fewer wait). The entry lives `QUEUE_ENTRY` seconds unless `owner` tries
        again; `release(key, owner)` by a waiter that gives up leaves the queue.
        """
        return self._acquire(key, owner, ttl, limit, join=True)

    def acquire(self, key: str, owner: str, ttl: float, limit: int) -> int | None:
        """See `SemaphoreStore.acquire`."""
        return self._acquire(key, owner, ttl, limit, join=False)[0]

    def renew(self, key: str, owner: str, ttl: float) -> bool:
        """See `SemaphoreStore.renew`; never re-acquires an expired slot."""
        ttl = _round_ttl(ttl)
        with self._mutex:
            now = self._now()
            holders = self._live(key, now)
            if holders is None or owner not in holders:
                return False
            holders[owner] = (holders[owner][0], now + ttl)
            return True

    def release(self, key: str, owner: str) -> bool:
        """See `SemaphoreStore.release`; wakes every waiter of `key`.

        A waiter that holds no slot leaves the queue instead (False), and the waiters are
        woken: the next one may now be among those a free slot goes to.
        """
        with self._mutex:
            holders = self._live(key, self._now())
            if holders is None or owner not in holders:
                if not self._leave(key, owner) or key not in self._listeners:
                    return False
                released = False
            else:
                del holders[owner]
                if not holders:
                    del self._holders[key]
                released = True
            callbacks = self._take_listeners(key)
        self._notify(callbacks)
        return released

    async def acquire_or_ttl_async(
        self, key: str, owner: str, ttl: float, limit: int = 1
    ) -> tuple[int | None, float | None]:
        """See `acquire_or_ttl`."""
        return self._acquire(key, owner, ttl, limit, join=False)

    async def acquire_or_queue_async(
        self, key: str, owner: str, ttl: float, limit: int = 1
    ) -> tuple[int | None, float | None]:
        """See `acquire_or_queue`."""
        return self._acquire(key, owner, ttl, limit, join=True)

    async def acquire_async(self, key: str, owner: str, ttl: float, limit: int) -> int | None:
        """See `acquire`."""
        return self._acquire(key, owner, ttl, limit, join=False)[0]

    async def renew_async(self, key: str, owner: str, ttl: float) -> bool:
        """See `renew`."""
        return self.renew(key, owner, ttl)

    async def release_async(self, key: str, owner: str) -> bool:
        """See `release`."""
        return self.release(key, owner)

    def __repr__(self) -> str:
        return f"MemorySemaphoreStore(time_provider={self._time_provider!r})"


_SYSTEM_STORE = MemoryLockStore(SYSTEM_TIME)
_BY_CLOCK: weakref.WeakKeyDictionary[TimeProvider, MemoryLockStore] = weakref.WeakKeyDictionary()
_BY_UNWEAKABLE_CLOCK: dict[int, tuple[TimeProvider, MemoryLockStore]] = {}
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
        except TypeError:
            entry = _BY_UNWEAKABLE_CLOCK.get(id(time_provider))
            if entry is None:
                entry = _BY_UNWEAKABLE_CLOCK[id(time_provider)] = (time_provider, MemoryLockStore(time_provider))
            store = entry[1]
        return store
