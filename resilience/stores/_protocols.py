"""What a lock or semaphore store must answer, and the optional capabilities it may offer.

Every method is atomic for its key. Tokens are integers >= 1, below 2**53, that only ever
increase per key, across release and expiry. A ttl is rounded up to whole milliseconds.
Capabilities are separate protocols: `isinstance` tells that a store has their methods.

What the methods cannot say, a store declares in its `StoreCapabilities`: which kind of store
it is (lock and semaphore stores have methods of the same names: a lock store's `acquire`
takes `(key, owner, ttl)`, a semaphore store's `(key, owner, ttl, limit)`), and which
flavours it serves (a store given only a sync client has `_async` methods that refuse).
`serves(store, protocol)` combines the two: it is how the library asks. A semaphore store that
lets one holder take several slots at once (`SupportsPermits`) takes a fifth argument,
`permits`.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, Protocol, runtime_checkable

if TYPE_CHECKING:
    from collections.abc import Callable, Hashable, Sequence

    from resilience.stores._info import LockInfo

__all__ = [
    "AsyncLockStore",
    "AsyncSemaphoreStore",
    "AsyncSupportsInspection",
    "AsyncSupportsLeaseInfo",
    "AsyncSupportsPermits",
    "AsyncSupportsReleaseNotification",
    "AsyncSupportsRenewMany",
    "AsyncSupportsSharedHolds",
    "DeclaresCapabilities",
    "LockStore",
    "SemaphoreStore",
    "StoreCapabilities",
    "SupportsInspection",
    "SupportsLeaseInfo",
    "SupportsPermits",
    "SupportsReleaseListener",
    "SupportsReleaseNotification",
    "SupportsRenewMany",
    "SupportsRenewalGroups",
    "SupportsSharedHolds",
    "serves",
]


@dataclass(frozen=True, slots=True)
class StoreCapabilities:
    """What a store tells the library beyond its methods (`store.capabilities`).

    - `kind`: `"lock"` or `"semaphore"`: which store protocols its `acquire` answers. None
      (the default): told by how many positional arguments `acquire` takes (three or four).
    - `serves_sync` / `serves_async`: the flavours it serves (both by default). A store given
      one client serves that flavour only: the protocols of the other are not used, although
      their methods exist (and refuse).

    What it offers the lease engine, all off by default:

    - `fair_queue`: waiters queue in the store: it offers `acquire_or_queue` (and its async
      twin) and takes a queued waiter's `owner` in `wait_released` / `add_release_listener`.
    - `answers_inline`: an in-process store whose async methods never suspend: the async
      engine calls its sync methods instead of starting a task per call.
    - `renews_on_timer`: its `renew_many` is a few quick steps in memory, so the sync runtime
      may send a batch right on its timer thread (never for a store that can block).
    - `lease_info_takes_limit`: a semaphore store whose `acquire_or_ttl` takes the `limit` too.
    - `pool_key`: the stores that give one key share one background pool (the Redis stores
      give their client's connection pool); None: the store itself.
    """

    kind: Literal["lock", "semaphore"] | None = None
    serves_sync: bool = True
    serves_async: bool = True
    fair_queue: bool = False
    answers_inline: bool = False
    renews_on_timer: bool = False
    lease_info_takes_limit: bool = False
    pool_key: object = None


# What a store that declares nothing offers.
NO_CAPABILITIES = StoreCapabilities()


@runtime_checkable
class DeclaresCapabilities(Protocol):
    """A store that declares its `StoreCapabilities`: what it offers the lease engine."""

    capabilities: StoreCapabilities


def capabilities_of(store: object) -> StoreCapabilities:
    """`store.capabilities`, or `NO_CAPABILITIES` for a store that declares none."""
    return store.capabilities if isinstance(store, DeclaresCapabilities) else NO_CAPABILITIES


def _accepts(method: object, count: int) -> bool:
    """Whether `method` can be called with `count` positional arguments."""
    try:
        inspect.signature(method).bind(*range(count))  # type: ignore[arg-type]
    except TypeError:
        return False
    except ValueError:  # no signature to inspect (a builtin): give it the benefit of the doubt
        return True
    return True


def serves(store: object, *protocols: type) -> bool:
    """Whether `store` offers one of `protocols`: it has the methods, serves the flavour, and is that kind of store.

    `isinstance(store, protocol)` answers only the first: a protocol is its methods. The
    flavour (`Async...` protocols are the asyncio flavour) is what the store's `capabilities`
    declare; so is the kind of store (`LockStore` and `SemaphoreStore` and their async twins),
    or, for a store that declares no `kind`, how many arguments its `acquire` takes.
    `SupportsPermits` is always told by `acquire`'s arguments (five).
    """
    return any(_serves(store, protocol) for protocol in protocols)


def _serves(store: object, protocol: type) -> bool:
    if not isinstance(store, protocol):
        return False
    capabilities = capabilities_of(store)
    is_async = protocol.__name__.startswith("Async")
    if not (capabilities.serves_async if is_async else capabilities.serves_sync):
        return False
    arity = _ARITY.get(protocol)
    if arity is None:
        return True
    if arity < 5 and capabilities.kind is not None:
        return capabilities.kind == ("lock" if arity == 3 else "semaphore")
    return _accepts(getattr(store, "acquire_async" if is_async else "acquire"), arity)


@runtime_checkable
class LockStore(Protocol):
    """A sync lease store: one holder per key."""

    def acquire(self, key: str, owner: str, ttl: float) -> int | None:
        """Take the free key for `owner` for `ttl` seconds: its fencing token, or None if held.

        An owner that already holds the live lease gets the same token again.
        """
        ...

    def renew(self, key: str, owner: str, ttl: float) -> bool:
        """Push `owner`'s live lease out to now + `ttl`; False if it is not ours any more."""
        ...

    def release(self, key: str, owner: str) -> bool:
        """Free the key if `owner` still holds it; True only then."""
        ...


@runtime_checkable
class AsyncLockStore(Protocol):
    """The asyncio flavour of `LockStore`: same meaning, `_async` names."""

    async def acquire_async(self, key: str, owner: str, ttl: float) -> int | None:
        """See `LockStore.acquire`."""
        ...

    async def renew_async(self, key: str, owner: str, ttl: float) -> bool:
        """See `LockStore.renew`."""
        ...

    async def release_async(self, key: str, owner: str) -> bool:
        """See `LockStore.release`."""
        ...


@runtime_checkable
class SupportsLeaseInfo(Protocol):
    """A store that tells a waiter how long the current holder's lease has left."""

    def acquire_or_ttl(self, key: str, owner: str, ttl: float) -> tuple[int | None, float | None]:
        """`(token, None)` when acquired; `(None, remaining seconds or None)` when held."""
        ...


@runtime_checkable
class AsyncSupportsLeaseInfo(Protocol):
    """The asyncio flavour of `SupportsLeaseInfo`."""

    async def acquire_or_ttl_async(self, key: str, owner: str, ttl: float) -> tuple[int | None, float | None]:
        """See `SupportsLeaseInfo.acquire_or_ttl`."""
        ...


@runtime_checkable
class SupportsReleaseNotification(Protocol):
    """A store that can wake a waiter when a key is released."""

    def wait_released(self, key: str, timeout: float) -> bool:
        """Block until `key` is released (True) or `timeout` seconds pass (False)."""
        ...


@runtime_checkable
class SupportsReleaseListener(Protocol):
    """A store that calls back when a key is released: what a sync waiter sleeps on.

    The callback runs on a thread of the store's choosing and must be quick (it sets an
    event). A waiter adds it, sleeps its own timeout (woken early by a release or by its
    signal), then removes it; a release it missed costs only that timeout.
    """

    def add_release_listener(self, key: str, callback: Callable[[], object]) -> Callable[[], None]:
        """Call `callback()` when `key` is released (or a slot of it freed); returns the remover."""
        ...


@runtime_checkable
class SupportsRenewMany(Protocol):
    """A store that renews many leases in one call: what keeps thousands of leases renewed cheaply.

    The sync lease runtime renews the leases of one store that are due together in one
    background call (each answer as `renew` would give it). Without it, it calls `renew` once
    per lease.
    """

    def renew_many(self, items: Sequence[tuple[str, str, float]]) -> list[bool | Exception]:
        """`renew(key, owner, ttl)` for each item, in order: its answer, or the error it raised."""
        ...


@runtime_checkable
class SupportsRenewalGroups(Protocol):
    """A store whose keys live on separate servers (Redis Cluster masters), each failing alone.

    The sync lease runtime batches renewals per group and sends each group's batches on a
    thread of its own, so a server that hangs or dies costs only the leases it serves.
    """

    def renewal_group(self, key: str) -> Hashable:
        """The server that serves `key` now (any hashable; None: the store's only one)."""
        ...


@runtime_checkable
class AsyncSupportsRenewMany(Protocol):
    """The asyncio flavour of `SupportsRenewMany`: the async runtime sends one task per batch."""

    async def renew_many_async(self, items: Sequence[tuple[str, str, float]]) -> list[bool | Exception]:
        """See `SupportsRenewMany.renew_many`."""
        ...


@runtime_checkable
class AsyncSupportsReleaseNotification(Protocol):
    """The asyncio flavour of `SupportsReleaseNotification`."""

    async def wait_released_async(self, key: str, timeout: float) -> bool:
        """See `SupportsReleaseNotification.wait_released`."""
        ...


@runtime_checkable
class SupportsSharedHolds(Protocol):
    """A lock store whose keys can also be held shared: a read-write lock.

    A key is held exclusively (one holder: `acquire`) or shared (any number of holders of
    `acquire_shared` and no exclusive one). Waiting requests of both modes form one FIFO queue
    per key: a shared request is granted only when no exclusive lease is held and no exclusive
    request waits ahead of it, and an exclusive one only when nothing is held and nobody waits
    ahead of it. A store without a queue refuses a shared request at least while an exclusive
    request is refused because of shared holders (so readers never starve a writer).

    Every hold, shared or exclusive, gets its token from the key's one increasing sequence, so
    an exclusive hold's token is greater than that of every hold granted before it. `renew`
    and `release` serve a shared holder as they serve an exclusive one, per owner: one shared
    holder's renewal, release or expiry never touches another's.
    """

    def acquire_shared(self, key: str, owner: str, ttl: float) -> int | None:
        """Take a shared hold of `key` for `owner` for `ttl` seconds: its token, or None if refused.

        An owner that already holds a live shared hold gets the same token again.
        """
        ...


@runtime_checkable
class SupportsInspection(Protocol):
    """A store that tells who holds a key and can break its leases: what `info` and the CLI use.

    `info(key)` is None when the key is free, else a `LockInfo` built by the store (its `key`
    as the store was given it; holders by token). `force_release(key)` frees the key whatever
    its holders (True if it was held): each holder's next `renew` answers False, so it learns
    of the loss; waiters are woken as by a release.
    """

    def info(self, key: str) -> LockInfo | None:
        """The key's live holders and waiters, or None when it is free."""
        ...

    def force_release(self, key: str) -> bool:
        """Free `key` whoever holds it: True if it was held, False if it was free."""
        ...


@runtime_checkable
class AsyncSupportsSharedHolds(Protocol):
    """The asyncio flavour of `SupportsSharedHolds`."""

    async def acquire_shared_async(self, key: str, owner: str, ttl: float) -> int | None:
        """See `SupportsSharedHolds.acquire_shared`."""
        ...


@runtime_checkable
class AsyncSupportsInspection(Protocol):
    """The asyncio flavour of `SupportsInspection`."""

    async def info_async(self, key: str) -> LockInfo | None:
        """See `SupportsInspection.info`."""
        ...

    async def force_release_async(self, key: str) -> bool:
        """See `SupportsInspection.force_release`."""
        ...


@runtime_checkable
class SemaphoreStore(Protocol):
    """A sync lease store with up to `limit` holders per key, each with its own token."""

    def acquire(self, key: str, owner: str, ttl: float, limit: int) -> int | None:
        """Take a slot of `key` for `owner` if fewer than `limit` are held: a token, or None."""
        ...

    def renew(self, key: str, owner: str, ttl: float) -> bool:
        """Push `owner`'s slot out to now + `ttl`; False if it is not held any more."""
        ...

    def release(self, key: str, owner: str) -> bool:
        """Free `owner`'s slot; True only if it still held one."""
        ...


@runtime_checkable
class AsyncSemaphoreStore(Protocol):
    """The asyncio flavour of `SemaphoreStore`."""

    async def acquire_async(self, key: str, owner: str, ttl: float, limit: int) -> int | None:
        """See `SemaphoreStore.acquire`."""
        ...

    async def renew_async(self, key: str, owner: str, ttl: float) -> bool:
        """See `SemaphoreStore.renew`."""
        ...

    async def release_async(self, key: str, owner: str) -> bool:
        """See `SemaphoreStore.release`."""
        ...


@runtime_checkable
class SupportsPermits(Protocol):
    """A semaphore store whose holder may take several slots at once, all or none.

    Every method of the store that takes `limit` also takes `permits` (an int, 1 <= permits <=
    limit, default 1) right after it: `acquire`, and where the store has them `acquire_or_ttl`,
    `acquire_or_queue` and `wait_released(key, timeout, owner, limit, permits)`. A holder of
    `permits` slots counts `permits` towards the limit until it releases or its lease expires;
    `renew` and `release` need no `permits` (the store remembers them per holder). Waiters keep
    their FIFO order by request: a request that does not fit is not overtaken by later ones.
    `semaphore(...)` refuses `permits > 1` with `ValidationError` on a store without it.
    """

    def acquire(self, key: str, owner: str, ttl: float, limit: int, permits: int = 1) -> int | None:
        """Take `permits` slots of `key` for `owner` if that many are free: a token, or None."""
        ...


@runtime_checkable
class AsyncSupportsPermits(Protocol):
    """The asyncio flavour of `SupportsPermits`: the `_async` methods take `permits` too."""

    async def acquire_async(self, key: str, owner: str, ttl: float, limit: int, permits: int = 1) -> int | None:
        """See `SupportsPermits.acquire`."""
        ...


_ARITY: dict[type, int] = {
    LockStore: 3,
    AsyncLockStore: 3,
    SemaphoreStore: 4,
    AsyncSemaphoreStore: 4,
    SupportsPermits: 5,
    AsyncSupportsPermits: 5,
}
"""How many positional arguments `acquire` (or `acquire_async`) takes, per store protocol."""
