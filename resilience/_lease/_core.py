"""The lease engine's decisions, as pure code that takes `now` (DESIGN §2.7, §3 "sans-IO").

Nothing here reads a clock, sleeps, or touches a store. The shells (`_sync`, `_async`) ask:

- `BackoffSchedule` / `SpinSchedule`: the acquisition is refused; how long to wait before the
  next attempt, or give up (`None`)?
- `LeaseTimeline`: given when the last successful acquire/renew was *sent*, when is the local
  deadline, when is the next renewal due, and after a failed renewal, when to retry?
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    import random

__all__ = [
    "BACKOFF_CAP",
    "FIRST_BACKOFF",
    "MIN_POLL",
    "AcquireSchedule",
    "BackoffSchedule",
    "LeaseTimeline",
    "SpinSchedule",
    "lease_deadline",
    "safety_margin",
]

FIRST_BACKOFF = 0.05
"""Upper bound of the first wait between acquisition attempts (seconds)."""
BACKOFF_CAP = 1.0
"""Upper bound of any wait between acquisition attempts (seconds)."""
MIN_POLL = 0.001
"""The shortest wait between attempts, so a lease about to expire is not polled in a spin."""
_RENEW_RETRY_FIRST = 0.05
_RENEW_RETRY_FLOOR = 0.001


def safety_margin(ttl: float) -> float:
    """How much earlier than the store the holder gives up a lease: max(2 ms, 1% of ttl), at most ttl/2.

    It absorbs clock-rate drift between the holder and the store (and the store's rounding of
    the ttl up to whole milliseconds works in the holder's favour). Never more than half the
    ttl, so that even a 1-2 ms lease is held for an instant (half its ttl still covers a
    drift of 50%).
    """
    return min(max(0.002, ttl * 0.01), ttl / 2)


def lease_deadline(sent_at: float, ttl: float) -> float:
    """The local deadline of a lease whose acquire/renew request was *sent* at `sent_at`.

    The store set the expiry to (its receive time + ttl), and receive time >= send time, so
    measuring from the send time can only err on the safe side.
    """
    return sent_at + ttl - safety_margin(ttl)


class AcquireSchedule(Protocol):
    """When to try again after a refused acquisition."""

    def next_wait(self, now: float, held_for: float | None) -> float | None:
        """Seconds to wait before the next attempt, or None to give up.

        `held_for` is the holder's remaining lease time when the store reports it.
        """
        ...


class BackoffSchedule:
    """The lock strategy's wait: bounded, jittered exponential backoff within a `wait` budget.

    The n-th wait (n from 0) is drawn uniformly from [b/2, b] with b = min(cap, first * 2**n),
    then capped by the holder's remaining lease time (when known, at least `MIN_POLL`) and by
    the time left until the deadline, so the last attempt happens at the deadline itself.
    `wait=0` gives exactly one attempt.
    """

    __slots__ = ("_attempt", "_random", "cap", "deadline", "first")

    def __init__(
        self,
        started: float,
        wait: float,
        rng: random.Random,
        *,
        first: float = FIRST_BACKOFF,
        cap: float = BACKOFF_CAP,
    ) -> None:
        self.deadline = started + wait
        self.first = first
        self.cap = cap
        self._random = rng
        self._attempt = 0

    def next_wait(self, now: float, held_for: float | None) -> float | None:
        """See `AcquireSchedule.next_wait`."""
        left = self.deadline - now
        if left <= 0:
            return None
        bound = min(self.cap, self.first * 2.0 ** min(self._attempt, 64))
        self._attempt += 1
        delay = bound * (0.5 + 0.5 * self._random.random())
        if held_for is not None:
            delay = min(delay, max(held_for, MIN_POLL))
        return min(delay, left)


class SpinSchedule:
    """The primitives' wait: `retries` more attempts, `delay` apart (a bounded spin)."""

    __slots__ = ("delay", "left")

    def __init__(self, retries: int, delay: float) -> None:
        self.left = retries
        self.delay = delay

    def next_wait(self, now: float, held_for: float | None) -> float | None:  # noqa: ARG002 - protocol
        """See `AcquireSchedule.next_wait`."""
        if self.left <= 0:
            return None
        self.left -= 1
        return self.delay


class LeaseTimeline:
    """The deadline and renewal schedule of one held lease.

    - `deadline`: send time of the last successful acquire/renew + ttl - `safety_margin(ttl)`.
    - `renewed(sent_at, now, ttl)` after a successful renewal or extend answered at `now`:
      returns when the next renewal is due (`sent_at + interval`), or None without background
      renewal. Replies can come back out of order (a renewal in flight while `extend` runs):
      a success sent before the previous success was answered may have reached the store
      before or after it, so the deadline is then the earlier of the two, never the later.
      Only `extend` changes the ttl (and scales the renewal interval with it).
    - `failed(now)` after a renewal that raised: returns when to retry, with exponential backoff
      (first 50 ms, never more than ttl/10) and never at or after the deadline; None when no
      useful time is left (the deadline will declare the loss).
    """

    __slots__ = ("_base_interval", "_base_ttl", "answered_at", "deadline", "failures", "interval", "ttl")

    def __init__(self, ttl: float, interval: float | None, sent_at: float, answered_at: float | None = None) -> None:
        self.ttl = ttl
        self.interval = interval
        self._base_ttl = ttl
        self._base_interval = interval
        self.deadline = lease_deadline(sent_at, ttl)
        self.answered_at = sent_at if answered_at is None else answered_at
        self.failures = 0

    def first_renewal(self, sent_at: float) -> float | None:
        """When the first renewal is due after the acquire sent at `sent_at`."""
        return None if self.interval is None else sent_at + self.interval

    def expired(self, now: float) -> bool:
        """Whether the local deadline has passed."""
        return now >= self.deadline

    def renewed(self, sent_at: float, now: float, ttl: float, *, extend: bool = False) -> float | None:
        """Record a success sent at `sent_at` with `ttl`, answered at `now`; when to renew next."""
        if extend and ttl != self.ttl:
            self.ttl = ttl
            if self._base_interval is not None:  # the heartbeat keeps its ratio to the ttl
                self.interval = self._base_interval * min(1.0, ttl / self._base_ttl)
        deadline = lease_deadline(sent_at, ttl)
        if sent_at >= self.answered_at:
            self.deadline = deadline  # sent after every earlier success was answered: it acted last
        else:
            self.deadline = min(self.deadline, deadline)  # the store's order is unknown
        self.answered_at = max(self.answered_at, now)
        self.failures = 0
        return None if self.interval is None else sent_at + self.interval

    def failed(self, now: float) -> float | None:
        """Record a failed renewal at `now`; when to retry, or None if it is too late."""
        self.failures += 1
        left = self.deadline - now
        delay = min(self.ttl / 10, _RENEW_RETRY_FIRST * 2.0 ** min(self.failures - 1, 64))
        # Never wait past the deadline: half the time left still leaves room for a reply.
        delay = min(delay, left / 2)
        if delay < _RENEW_RETRY_FLOOR:
            return None
        return now + delay
