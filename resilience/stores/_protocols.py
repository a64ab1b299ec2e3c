"""What a lock or semaphore store must answer, and the optional capabilities it may offer.

Every method is atomic for its key. Tokens are integers >= 1, below 2**53, that only ever
increase per key, across release and expiry. A ttl is rounded up to whole milliseconds.
Capabilities are separate protocols, detected with `isinstance`.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

__all__ = [
    "AsyncLockStore",
    "AsyncSemaphoreStore",
    "AsyncSupportsLeaseInfo",
    "AsyncSupportsReleaseNotification",
    "LockStore",
    "SemaphoreStore",
    "SupportsLeaseInfo",
    "SupportsReleaseNotification",
]


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
class AsyncSupportsReleaseNotification(Protocol):
    """The asyncio flavour of `SupportsReleaseNotification`."""

    async def wait_released_async(self, key: str, timeout: float) -> bool:
        """See `SupportsReleaseNotification.wait_released`."""
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
