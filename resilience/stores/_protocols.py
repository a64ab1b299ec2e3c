"""What a lock or semaphore store must answer, and the optional capabilities it may offer.

Every method is atomic for its key. Tokens are integers >= 1, below 2**53, that only ever
increase per key, across release and expiry. A ttl is rounded up to whole milliseconds.
Capabilities are separate protocols, detected with `isinstance`.

Lock and semaphore stores have methods of the same names; `isinstance` tells them apart by
what `acquire` accepts: a lock store's takes `(key, owner, ttl)`, a semaphore store's
`(key, owner, ttl, limit)`. A store whose `acquire` accepts both (`*args`) passes for either.
"""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from collections.abc import Callable, Hashable, Sequence

__all__ = [
    "AsyncLockStore",
    "AsyncSemaphoreStore",
    "AsyncSupportsLeaseInfo",
    "AsyncSupportsReleaseNotification",
    "AsyncSupportsRenewMany",
    "LockStore",
    "SemaphoreStore",
    "SupportsLeaseInfo",
    "SupportsReleaseListener",
    "SupportsReleaseNotification",
    "SupportsRenewMany",
    "SupportsRenewalGroups",
]


def _accepts(method: object, count: int) -> bool:
    """Whether `method` can be called with `count` positional arguments."""
    try:
        inspect.signature(method).bind(*range(count))  # type: ignore[arg-type]
    except TypeError:
        return False
    except ValueError:  # no signature to inspect (a builtin): give it the benefit of the doubt
        return True
    return True


_ARITY: dict[type, int] = {}
"""How many positional arguments `acquire` takes, per store protocol (filled below)."""
_FLAVOURED: set[type] = set()
"""The protocols of this module (filled below): their subclasses get the plain check."""


class _StoreMeta(type(Protocol)):  # type: ignore[misc]
    """`isinstance` also checks how many arguments `acquire` (or `acquire_async`) takes."""

    def __instancecheck__(cls, instance: Any) -> bool:
        if not super().__instancecheck__(instance):
            return False
        if cls not in _FLAVOURED:  # a subclass of a store protocol: the plain structural check
            return True
        is_async = cls.__name__.startswith("Async")
        # A store with one flavour per client says which it serves (the Redis stores do).
        if getattr(instance, "has_async_client" if is_async else "has_sync_client", True) is False:
            return False
        arity = _ARITY.get(cls)
        return arity is None or _accepts(getattr(instance, "acquire_async" if is_async else "acquire"), arity)


@runtime_checkable
class LockStore(Protocol, metaclass=_StoreMeta):
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
class AsyncLockStore(Protocol, metaclass=_StoreMeta):
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
class SupportsLeaseInfo(Protocol, metaclass=_StoreMeta):
    """A store that tells a waiter how long the current holder's lease has left."""

    def acquire_or_ttl(self, key: str, owner: str, ttl: float) -> tuple[int | None, float | None]:
        """`(token, None)` when acquired; `(None, remaining seconds or None)` when held."""
        ...


@runtime_checkable
class AsyncSupportsLeaseInfo(Protocol, metaclass=_StoreMeta):
    """The asyncio flavour of `SupportsLeaseInfo`."""

    async def acquire_or_ttl_async(self, key: str, owner: str, ttl: float) -> tuple[int | None, float | None]:
        """See `SupportsLeaseInfo.acquire_or_ttl`."""
        ...


@runtime_checkable
class SupportsReleaseNotification(Protocol, metaclass=_StoreMeta):
    """A store that can wake a waiter when a key is released."""

    def wait_released(self, key: str, timeout: float) -> bool:
        """Block until `key` is released (True) or `timeout` seconds pass (False)."""
        ...


@runtime_checkable
class SupportsReleaseListener(Protocol, metaclass=_StoreMeta):
    """A store that calls back when a key is released: what a sync waiter sleeps on.

    The callback runs on a thread of the store's choosing and must be quick (it sets an
    event). A waiter adds it, sleeps its own timeout (woken early by a release or by its
    signal), then removes it; a release it missed costs only that timeout.
    """

    def add_release_listener(self, key: str, callback: Callable[[], object]) -> Callable[[], None]:
        """Call `callback()` when `key` is released (or a slot of it freed); returns the remover."""
        ...


@runtime_checkable
class SupportsRenewMany(Protocol, metaclass=_StoreMeta):
    """A store that renews many leases in one call: what keeps thousands of leases renewed cheaply.

    The sync lease runtime renews the leases of one store that are due together in one
    background call (each answer as `renew` would give it). Without it, it calls `renew` once
    per lease.
    """

    def renew_many(self, items: Sequence[tuple[str, str, float]]) -> list[bool | Exception]:
        """`renew(key, owner, ttl)` for each item, in order: its answer, or the error it raised."""
        ...


@runtime_checkable
class SupportsRenewalGroups(Protocol, metaclass=_StoreMeta):
    """A store whose keys live on separate servers (Redis Cluster masters), each failing alone.

    The sync lease runtime batches renewals per group and sends each group's batches on a
    thread of its own, so a server that hangs or dies costs only the leases it serves.
    """

    def renewal_group(self, key: str) -> Hashable:
        """The server that serves `key` now (any hashable; None: the store's only one)."""
        ...


@runtime_checkable
class AsyncSupportsRenewMany(Protocol, metaclass=_StoreMeta):
    """The asyncio flavour of `SupportsRenewMany`: the async runtime sends one task per batch."""

    async def renew_many_async(self, items: Sequence[tuple[str, str, float]]) -> list[bool | Exception]:
        """See `SupportsRenewMany.renew_many`."""
        ...


@runtime_checkable
class AsyncSupportsReleaseNotification(Protocol, metaclass=_StoreMeta):
    """The asyncio flavour of `SupportsReleaseNotification`."""

    async def wait_released_async(self, key: str, timeout: float) -> bool:
        """See `SupportsReleaseNotification.wait_released`."""
        ...


@runtime_checkable
class SemaphoreStore(Protocol, metaclass=_StoreMeta):
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
class AsyncSemaphoreStore(Protocol, metaclass=_StoreMeta):
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


_ARITY.update({LockStore: 3, AsyncLockStore: 3, SemaphoreStore: 4, AsyncSemaphoreStore: 4})
_FLAVOURED.update(
    {
        *_ARITY,
        SupportsLeaseInfo,
        AsyncSupportsLeaseInfo,
        SupportsReleaseNotification,
        SupportsReleaseListener,
        SupportsRenewMany,
        SupportsRenewalGroups,
        AsyncSupportsRenewMany,
        AsyncSupportsReleaseNotification,
    }
)
