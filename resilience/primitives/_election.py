"""Leader election: one leader per key at a time, the other candidates waiting in line to take over.

    from resilience.primitives import election

    e = election(redis_client("redis://localhost:6379/0"), "scheduler", ttl=15)
    e.run(lambda handle: schedule_until(handle.signal, term=handle.token))

An election is a lock on `key` under `prefix` (so `lock(client, prefix="election")` inspects
and breaks it), run with the primitives' lease policy: the leader's lease renews every ttl/4,
its signal aborts the moment leadership is lost, and `run` then raises `LockLeaseLostError`
even when `lead` returned. Candidates wait in the store's fair order, without a deadline
unless `wait` gives one. The owner id of the lease carries the candidate's identity
(`<random id>:<identity>`), which is how `leader()` and the CLI tell who leads.
"""

from __future__ import annotations

import math
import os
import socket
import string
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from resilience._lease import BackoffSchedule, new_owner
from resilience._runtime._closing import Closing
from resilience._validation import Problems
from resilience.exceptions import ValidationError
from resilience.primitives._locks import Locks

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from resilience._lease._core import AcquireSchedule
    from resilience._time import TimeProvider
    from resilience._validation import Duration
    from resilience.primitives._locks import LockHandle, _Options
    from resilience.stores import LockInfo

__all__ = ["Election", "LeaderInfo", "election"]

T = TypeVar("T")

IDENTITY_MAX = 256
"""The longest identity (characters)."""
_ID_LENGTH = len(new_owner())
_HEX = frozenset(string.hexdigits)


@dataclass(frozen=True, slots=True)
class LeaderInfo:
    """The current leader: its identity, its term (the lease's fencing token) and seconds left on its lease."""

    identity: str
    token: int
    expires_in: float | None


def default_identity() -> str:
    """`<hostname>:<pid>` of the calling process (read at each use: a forked child has its own pid)."""
    return f"{socket.gethostname()[:200]}:{os.getpid()}"


def identity_of(owner: str) -> str:
    """The identity an election's owner id carries (`<random id>:<identity>`); another owner id as it is."""
    head, colon, identity = owner.partition(":")
    return identity if colon and len(head) == _ID_LENGTH and _HEX.issuperset(head) else owner


class _ElectionLocks(Locks):
    """The lock under an election: `Election` events, the identity in the owner id, waits without a deadline."""

    _kind = "election"
    _strategy_name = "Election"

    __slots__ = ("identity",)

    def __init__(
        self, client: object, identity: str | None, *, prefix: str, ttl: Duration, time_provider: TimeProvider | None
    ) -> None:
        self.identity = identity
        super().__init__(client, prefix=prefix, ttl=ttl, time_provider=time_provider)

    def _owner(self) -> str:
        return f"{new_owner()}:{self.identity or default_identity()}"

    def _schedule(self, options: _Options) -> AcquireSchedule | None:
        if options.wait is None:  # `run(wait=None)`: wait in line for as long as it takes
            return BackoffSchedule(self._tp.monotonic(), math.inf, self._tp.random())
        return super()._schedule(options)


def _leader(found: LockInfo | None) -> LeaderInfo | None:
    if found is None:
        return None
    holder = found.holders[0]
    return LeaderInfo(identity_of(holder.owner), holder.token, holder.expires_in)


class Election(Closing):
    """An election on one key: what `election(client, key)` returns.

    See `election` for the arguments and the module docstring for the policy.
    """

    __slots__ = ("_locks", "key")

    def __init__(
        self,
        client: object,
        key: str,
        *,
        identity: str | None,
        ttl: Duration,
        prefix: str,
        time_provider: TimeProvider | None,
    ) -> None:
        problems = Problems()
        given: object = key
        if not isinstance(given, str) or not given:
            problems.add("key", f"must be a non-empty str, got {key!r}")
        named: object = identity
        if named is not None and (not isinstance(named, str) or not named or len(named) > IDENTITY_MAX):
            shown = f"a str of {len(named)} characters" if isinstance(named, str) and named else repr(named)[:80]
            problems.add("identity", f"must be a non-empty str of at most {IDENTITY_MAX} characters, got {shown}")
        if problems:
            raise ValidationError(problems.items)
        self.key = key
        """The election's key (the lock key under the prefix)."""
        self._locks = _ElectionLocks(client, identity, prefix=prefix, ttl=ttl, time_provider=time_provider)

    @property
    def identity(self) -> str:
        """Who this candidate is, as `leader()` and the CLI show it (default `<hostname>:<pid>`)."""
        return self._locks.identity or default_identity()

    @property
    def ttl(self) -> float:
        """The leader's lease length (seconds): a dead leader is replaced within it plus one hand-off."""
        return self._locks.ttl

    def run(self, lead: Callable[[LockHandle], T], /, *, wait: Duration | None = None) -> T:
        """Wait until elected (in line with the other candidates), then lead: `lead(handle)`; its value.

        Args:
            lead: the leader's work; it gets the `LockHandle` (`handle.token` is the term,
                `handle.signal` aborts the moment leadership is lost). Returning ends leadership
                (the lease is released).
            wait: None waits without a deadline; a duration bounds the wait.

        Raises:
            LockNotAcquiredError: `wait` passed before this candidate was elected.
            LockLeaseLostError: leadership was lost while leading, even if `lead` returned.
            ValidationError: a bad `wait`, or a sync call on an asyncio-only client.

        A waiting `run` ends when the ambient context's signal aborts (`use_context(signal=...)`:
        it raises the signal's reason) or on `KeyboardInterrupt`, leaving the line.
        """
        return self._locks.run(self.key, lead, wait=wait)

    async def run_async(self, lead: Callable[[LockHandle], Awaitable[T]], /, *, wait: Duration | None = None) -> T:
        """The asyncio twin of `run`: cancelling the task ends the wait (leaving the line) or the leadership."""
        return await self._locks.run_async(self.key, lead, wait=wait)

    def leader(self) -> LeaderInfo | None:
        """The current leader (identity, term, seconds left on its lease), or None when nobody leads."""
        return _leader(self._locks.info(self.key))

    async def leader_async(self) -> LeaderInfo | None:
        """See `leader`."""
        return _leader(await self._locks.info_async(self.key))

    def close(self) -> None:
        """Close what the election opened (a store made from a client); clients and stores you passed stay open."""
        self._locks.close()

    async def aclose(self) -> None:
        """The asyncio twin of `close`."""
        await self._locks.aclose()

    def __repr__(self) -> str:
        return f"<Election key={self.key!r} identity={self.identity!r} ttl={self.ttl:g}>"


def election(
    client: object,
    key: str,
    /,
    *,
    identity: str | None = None,
    ttl: Duration = 15.0,
    prefix: str = "election",
    time_provider: TimeProvider | None = None,
) -> Election:
    """A leader election on `key`: one leader at a time, the others waiting in line to take over.

    Args:
        client: anything `lock` accepts: a Redis client (sync or asyncio), or a lock store
            (memory, Redis, PostgreSQL).
        key: what is led (`"scheduler"`); the election's lock key is `<prefix>:<key>`.
        identity: who this candidate is, shown by `leader()` and the CLI (default
            `<hostname>:<pid>`); a non-empty str of at most 256 characters.
        ttl: the leader's lease (renewed every ttl/4): a dead leader is replaced within it
            plus one hand-off.
        prefix: the key prefix, as for `lock`.
        time_provider: the clock (default: the system clock, or a memory store's own).

    Raises:
        ValidationError: a bad argument, before any store call.
    """
    return Election(client, key, identity=identity, ttl=ttl, prefix=prefix, time_provider=time_provider)
