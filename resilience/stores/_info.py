"""What a store tells about a held key: `LockInfo` and its `HolderInfo`s (the inspection capability).

Stores build these in their `info` methods (`SupportsInspection`); the primitives hand them to
the caller with the key as the caller named it, and the CLI prints them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from collections.abc import Callable

    from resilience.stores._protocols import AsyncSupportsInspection, SupportsInspection
    from resilience.stores._steps import Steps

__all__ = ["HolderInfo", "HoldersFromInfo", "LockInfo", "LockMode", "force_release_by_owner", "lock_mode"]

LockMode = Literal["exclusive", "shared", "semaphore"]
"""How a key is held: by one lock holder, by shared (read) holders, or by semaphore holders."""

_ROUNDS = 3
"""How often `force_release_by_owner` reads again when every holder it read was gone already."""


@dataclass(frozen=True, slots=True)
class HolderInfo:
    """One live holder of a key: its owner id, fencing token, seconds left and permits taken."""

    owner: str
    token: int
    expires_in: float | None
    """Seconds until the store expires the lease (None: the store keeps no expiry for it)."""
    permits: int = 1
    """The slots this holder takes (1 for a lock holder)."""


@dataclass(frozen=True, slots=True)
class LockInfo:
    """A held key: how it is held, its live holders (by token), and how many wait (None: unknown)."""

    key: str
    mode: LockMode
    holders: tuple[HolderInfo, ...]
    waiters: int | None
    """The length of the key's waiter queue; None when the store does not record waiters."""


def _holder_tuples(found: LockInfo | None) -> list[tuple[str, int, float, int]]:
    """`info`'s holders as `(owner, token, seconds left, permits)`: what a semaphore store's `holders` returns."""
    return [] if found is None else [(h.owner, h.token, h.expires_in or 0.0, h.permits) for h in found.holders]


class HoldersFromInfo:
    """A semaphore store's `holders` and `holders_async`, read from its `info` (`SupportsInspection`)."""

    def holders(self: SupportsInspection, key: str) -> list[tuple[str, int, float, int]]:
        """The live holders of `key`: `(owner, token, seconds left, permits)`, by token."""
        return _holder_tuples(self.info(key))

    async def holders_async(self: AsyncSupportsInspection, key: str) -> list[tuple[str, int, float, int]]:
        """See `holders`."""
        return _holder_tuples(await self.info_async(key))


def acquire_answer(reply: Any) -> tuple[int | None, float | None]:
    """`(token, None)` or `(None, seconds until it may be free, or None)` from an acquire's one number.

    What the Redis acquire scripts and the PostgreSQL acquire functions answer: a token (> 0),
    -(ms until a holder's lease ends) (< 0), or 0 when no time is told.
    """
    value = int(reply)
    if value > 0:
        return value, None
    return None, (-value / 1000 if value < 0 else None)


def lock_mode(*, shared: bool) -> LockMode:
    """The mode of a held lock key: the one place a lock store's `info` decides it."""
    return "shared" if shared else "exclusive"


def force_release_by_owner(info: Callable[[str], Any], release: Callable[[str, str], Any], key: str) -> Steps[bool]:
    """Break `key` through the store's own owner-checked `release`: each holder `info` reads.

    True if a holder was released; False when the key was free. A holder that ended between
    the read and its release is skipped; when all had, the key is read again (a few times).
    Steps (`run_steps`): `info` and `release` are the store's sync methods or its `_async` ones.
    """
    for _ in range(_ROUNDS):
        found: LockInfo | None = yield info(key)
        if found is None:
            return False
        released = []
        for holder in found.holders:  # every holder, then any
            released.append((yield release(key, holder.owner)))  # noqa: PERF401 - no yield in a comprehension
        if any(released):
            return True
    return False
