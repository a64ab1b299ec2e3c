"""Store adapters: one shape for lock stores and semaphore stores, capabilities detected once.

The engine calls `acquire(key, owner, ttl) -> (token, held_for)`, `renew_many` and the
optional release notification without knowing which kind of store it drives; a semaphore
store's `limit` is bound into `SemaphoreOps`. A single `renew` or `release` (and their `_async`
twins) is the store's own method: both kinds take `(key, owner[, ttl])`. An adapter's `prefix` (the primitives':
`<prefix>:`) is what the engine puts before each key once, when it binds the key to a lease:
the adapter's calls take that store key.
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any

from resilience.stores import AsyncSupportsPermits, SupportsPermits, SupportsRenewalGroups
from resilience.stores._protocols import (
    AsyncLockStore,
    AsyncSemaphoreStore,
    AsyncSupportsLeaseInfo,
    AsyncSupportsReleaseNotification,
    AsyncSupportsRenewMany,
    AsyncSupportsSharedHolds,
    LockStore,
    SemaphoreStore,
    SupportsLeaseInfo,
    SupportsReleaseListener,
    SupportsReleaseNotification,
    SupportsRenewMany,
    SupportsSharedHolds,
    capabilities_of,
    serves,
)
from resilience.stores._steps import Steps, run_steps, run_steps_async

if TYPE_CHECKING:
    from collections.abc import Callable, Hashable

__all__ = ["LockOps", "SemaphoreOps", "SharedLockOps", "StoreOps"]


class StoreOps:
    """The store calls the lease engine makes, for one store (sync and/or async)."""

    __slots__ = (
        "extra",
        "fair",
        "group",
        "has_async",
        "has_sync",
        "inline",
        "keywords",
        "lease_info",
        "lease_info_async",
        "listen",
        "notify",
        "notify_async",
        "pool_owner",
        "prefix",
        "renews_many",
        "renews_many_async",
        "renews_on_timer",
        "store",
    )

    def __init__(self, store: Any, *, sync_protocol: type, async_protocol: type, prefix: str) -> None:
        self.store = store
        self.prefix = prefix
        # Whose thread pool runs the background calls: the store itself, or the key it
        # declares (its client's connection pool).
        capabilities = capabilities_of(store)
        self.pool_owner: object = store if capabilities.pool_key is None else capabilities.pool_key
        self.has_sync = serves(store, sync_protocol)
        self.has_async = serves(store, async_protocol)
        self.lease_info = serves(store, SupportsLeaseInfo)
        self.lease_info_async = serves(store, AsyncSupportsLeaseInfo)
        self.notify = serves(store, SupportsReleaseNotification)
        self.notify_async = serves(store, AsyncSupportsReleaseNotification)
        self.renews_many = serves(store, SupportsRenewMany)
        # Keys on separate servers (`SupportsRenewalGroups`): sync renewals are batched, and
        # sent on a thread, per server, so that one server that hangs costs only its leases.
        self.group: Callable[[str], Hashable] | None = (
            store.renewal_group if serves(store, SupportsRenewalGroups) else None
        )
        self.renews_many_async = serves(store, AsyncSupportsRenewMany)
        # An in-process store whose async methods never suspend (the memory stores): the
        # async engine calls its sync methods directly instead of starting a task per call.
        self.inline = capabilities.answers_inline and self.has_sync
        # A batch of renewals the sync runtime may send right on its timer thread: the memory
        # stores' own `renew_many` (never a subclass's, never user code).
        self.renews_on_timer = self.inline and self.renews_many and capabilities.renews_on_timer
        # A callback on release (`SupportsReleaseListener`): a sync waiter sleeps until a
        # release *or* its signal, whichever comes first, with no polling.
        self.listen: Callable[..., Callable[[], None]] | None = (
            store.add_release_listener if serves(store, SupportsReleaseListener) else None
        )
        # A store that queues its waiters (`acquire_or_queue`, and an `owner` for its release
        # notification): a waiter joins the queue, sleeps until its turn, and leaves the queue
        # with `release` when it gives up. A semaphore's: free slots go to the waiters in
        # arrival order.
        self.fair = capabilities.fair_queue
        # The arguments a store's acquire and queue calls take after the lock store's (a semaphore's
        # limit), and the keywords its queue calls take (a shared hold's `shared=True`).
        self.extra: tuple[int, ...] = ()
        self.keywords: dict[str, bool] = {}

    def queue(self, key: str, owner: str, ttl: float) -> tuple[int | None, float | None]:
        """`acquire` for a waiter: refused, it joins the store's queue (only when `fair`)."""
        return self.store.acquire_or_queue(key, owner, ttl, *self.extra, **self.keywords)  # type: ignore[no-any-return]

    async def queue_async(self, key: str, owner: str, ttl: float) -> tuple[int | None, float | None]:
        """See `queue`."""
        return await self.store.acquire_or_queue_async(key, owner, ttl, *self.extra, **self.keywords)  # type: ignore[no-any-return]

    def acquire(self, key: str, owner: str, ttl: float) -> tuple[int | None, float | None]:
        """The token (or None) and, when refused and the store knows it, the holder's time left.

        A lock store's exclusive hold (no `extra` arguments: the lock's path stays a plain call); the other
        adapters override it.
        """
        if self.lease_info:
            return self.store.acquire_or_ttl(key, owner, ttl)  # type: ignore[no-any-return]
        return self.store.acquire(key, owner, ttl), None

    async def acquire_async(self, key: str, owner: str, ttl: float) -> tuple[int | None, float | None]:
        """See `acquire`."""
        if self.lease_info_async:
            return await self.store.acquire_or_ttl_async(key, owner, ttl)  # type: ignore[no-any-return]
        return await self.store.acquire_async(key, owner, ttl), None

    def renew_many(self, items: list[tuple[str, str, float]]) -> list[bool | Exception]:
        """Renew each `(key, owner, ttl)`: its answer, or the exception its renewal raised.

        One store call when the store offers `renew_many` (`SupportsRenewMany`); else one
        `renew` per item, each failing alone.
        """
        store = self.store
        return run_steps(_renewals(items, store.renew_many if self.renews_many else None, store.renew))

    async def renew_many_async(self, items: list[tuple[str, str, float]]) -> list[bool | Exception]:
        """See `renew_many` (one store call when `renews_many_async`)."""
        store = self.store
        many = store.renew_many_async if self.renews_many_async else None
        return await run_steps_async(_renewals(items, many, store.renew_async))

    def wait_released(self, key: str, timeout: float, owner: str) -> bool:
        """`store.wait_released` (only when `notify`); on a store that queues waiters (`fair`), until `owner`'s turn.

        A semaphore's turn: its slots are free for it.
        """
        turn = (owner, *self.extra) if self.fair else ()  # what a fair store's wait takes after the timeout
        return bool(self.store.wait_released(key, timeout, *turn))

    async def wait_released_async(self, key: str, timeout: float, owner: str) -> bool:
        """`store.wait_released_async` (only when `notify_async`); see `wait_released`."""
        turn = (owner, *self.extra) if self.fair else ()
        return bool(await self.store.wait_released_async(key, timeout, *turn))


class LockOps(StoreOps):
    """A `LockStore` / `AsyncLockStore`: exclusive holds."""

    __slots__ = ()

    def __init__(self, store: Any, prefix: str = "") -> None:
        super().__init__(store, sync_protocol=LockStore, async_protocol=AsyncLockStore, prefix=prefix)


class SharedLockOps(LockOps):
    """Shared holds of a lock store (`SupportsSharedHolds` / `AsyncSupportsSharedHolds`).

    A flavour is served only when the store has both the lock protocol and the shared-holds
    capability of it. Renewal, release and notification are the store's own, per owner. The
    stores that queue their waiters take `shared=True` on `acquire_or_ttl` / `acquire_or_queue`
    (the shared request's place in the key's one queue, and the holder's time left).
    """

    __slots__ = ()

    def __init__(self, store: Any, prefix: str = "") -> None:
        super().__init__(store, prefix)
        self.has_sync = self.has_sync and serves(store, SupportsSharedHolds)
        self.has_async = self.has_async and serves(store, AsyncSupportsSharedHolds)
        self.keywords = {"shared": True}

    @staticmethod
    def supported(store: object) -> bool:
        """Whether `store` can hold keys shared in some flavour."""
        return serves(store, SupportsSharedHolds, AsyncSupportsSharedHolds)

    def acquire(self, key: str, owner: str, ttl: float) -> tuple[int | None, float | None]:
        """See `StoreOps.acquire`."""
        if self.fair and self.lease_info:
            return self.store.acquire_or_ttl(key, owner, ttl, shared=True)  # type: ignore[no-any-return]
        return self.store.acquire_shared(key, owner, ttl), None

    async def acquire_async(self, key: str, owner: str, ttl: float) -> tuple[int | None, float | None]:
        """See `StoreOps.acquire`."""
        if self.fair and self.lease_info_async:
            return await self.store.acquire_or_ttl_async(key, owner, ttl, shared=True)  # type: ignore[no-any-return]
        return await self.store.acquire_shared_async(key, owner, ttl), None


class SemaphoreOps(StoreOps):
    """A `SemaphoreStore` / `AsyncSemaphoreStore` with its `limit` bound (for the primitives).

    `permits` (1 unless made by `with_permits`) is how many slots each acquire asks for; it
    reaches the store only when above 1, so a store without `SupportsPermits` keeps working
    for single slots.
    """

    __slots__ = ("limit", "permits", "takes_permits", "takes_permits_async")

    def __init__(self, store: Any, limit: int, prefix: str = "") -> None:
        super().__init__(store, sync_protocol=SemaphoreStore, async_protocol=AsyncSemaphoreStore, prefix=prefix)
        self.limit = limit
        self.permits = 1
        self.extra = (limit,)  # the limit, and the permits when more than one (`with_permits`)
        self.takes_permits = serves(store, SupportsPermits)  # several slots per holder
        self.takes_permits_async = serves(store, AsyncSupportsPermits)
        # The semaphore stores' lease info takes the limit too; other stores' is not used.
        if not capabilities_of(store).lease_info_takes_limit:
            self.lease_info = self.lease_info_async = False

    def with_permits(self, permits: int) -> SemaphoreOps:
        """These ops asking for `permits` slots per acquire (self when that is already so)."""
        if permits == self.permits:
            return self
        ops = copy.copy(self)
        ops.permits = permits
        ops.extra = (self.limit,) if permits == 1 else (self.limit, permits)
        return ops

    def acquire(self, key: str, owner: str, ttl: float) -> tuple[int | None, float | None]:
        """See `StoreOps.acquire`."""
        if self.lease_info:
            return self.store.acquire_or_ttl(key, owner, ttl, *self.extra)  # type: ignore[no-any-return]
        return self.store.acquire(key, owner, ttl, *self.extra), None

    async def acquire_async(self, key: str, owner: str, ttl: float) -> tuple[int | None, float | None]:
        """See `StoreOps.acquire`."""
        if self.lease_info_async:
            return await self.store.acquire_or_ttl_async(key, owner, ttl, *self.extra)  # type: ignore[no-any-return]
        return await self.store.acquire_async(key, owner, ttl, *self.extra), None


def _renewals(
    items: list[tuple[str, str, float]], many: Callable[..., Any] | None, one: Callable[..., Any]
) -> Steps[list[bool | Exception]]:
    """The steps of `renew_many` for either flavour: `many(items)` once when given, else `one(key, owner, ttl)` each."""
    if many is not None:
        try:
            answers = yield many(items)
        except Exception as exc:  # noqa: BLE001 - the call failed: every renewal in it failed
            return [exc] * len(items)
        return [answer if isinstance(answer, Exception) else bool(answer) for answer in answers]
    results: list[bool | Exception] = []
    for key, owner, ttl in items:
        try:
            results.append(bool((yield one(key, owner, ttl))))
        except Exception as exc:  # noqa: BLE001 - reported with this item
            results.append(exc)
    return results
