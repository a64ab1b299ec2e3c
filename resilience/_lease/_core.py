"""The lease engine's decisions, as pure code that takes `now` (sans-IO: docs/decisions.md).

Nothing here reads a clock, sleeps, or touches a store. The shells (`_sync`, `_async`) ask:

- `BackoffSchedule` / `SpinSchedule`: the acquisition is refused; how long to wait before the
  next attempt, or give up (`None`)?
- `LeaseMachine`: one held lease's state machine: given acquired / tick / renew answered,
  failed or timed out / extend answered / body ended / release answered, what to do (arm the
  timer, renew, lose, report, release)? The runtimes (`_lease`, `_async`) only perform it.
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
    "LeaseMachine",
    "SpinSchedule",
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


class AcquireSchedule(Protocol):
    """When to try again after a refused acquisition."""

    def next_wait(self, now: float, held_for: float | None) -> float | None:
        """Seconds to wait before the next attempt, or None to give up.

        `held_for` is the holder's remaining lease time when the store reports it.
        """
        ...

    def woken(self, now: float) -> None:
        """The last wait was ended at `now` by a release notification, not by its timeout."""
        ...


class BackoffSchedule:
    """The lock strategy's wait: bounded, jittered exponential backoff within a `wait` budget.

    The n-th wait (n from 0) is drawn uniformly from [b/2, b] with b = min(`BACKOFF_CAP`, `FIRST_BACKOFF` * 2**n),
    then capped by the holder's remaining lease time (when known, at least `MIN_POLL`) and by
    the time left until the deadline, so the last attempt happens at the deadline itself.
    `wait=0` gives exactly one attempt.
    """

    __slots__ = ("_attempt", "_random", "deadline")

    def __init__(self, started: float, wait: float, rng: random.Random) -> None:
        self.deadline = started + wait
        self._random = rng
        self._attempt = 0

    def next_wait(self, now: float, held_for: float | None) -> float | None:
        """See `AcquireSchedule.next_wait`."""
        left = self.deadline - now
        if left <= 0:
            return None
        bound = min(BACKOFF_CAP, FIRST_BACKOFF * 2.0 ** min(self._attempt, 64))
        self._attempt += 1
        delay = bound * (0.5 + 0.5 * self._random.random())
        if held_for is not None:
            delay = min(delay, max(held_for, MIN_POLL))
        return min(delay, left)

    def woken(self, now: float) -> None:
        """See `AcquireSchedule.woken`: nothing to do, the budget is time."""


class SpinSchedule:
    """The primitives' `retries`: up to `retries` more attempts, `delay` apart (a bounded spin).

    A wait that a release notification ends early does not use up a retry (docs/primitives.md),
    as long as the nominal budget (`retries * delay` from the first refusal) is
    not spent: a caller that asked for about 5 s is not sent away after 0.25 s of wake-ups,
    nor kept forever by a stream of them.
    """

    __slots__ = ("deadline", "delay", "left")

    def __init__(self, retries: int, delay: float) -> None:
        self.left = retries
        self.delay = delay
        self.deadline: float | None = None

    def next_wait(self, now: float, held_for: float | None) -> float | None:  # noqa: ARG002 - protocol
        """See `AcquireSchedule.next_wait`."""
        if self.deadline is None:
            self.deadline = now + self.left * self.delay
        if self.left <= 0:
            return None
        self.left -= 1
        return self.delay

    def woken(self, now: float) -> None:
        """See `AcquireSchedule.woken`: the retry that wait used is given back, within the budget."""
        if self.deadline is not None and now < self.deadline:
            self.left += 1


# What an input asks of the runtime (`LeaseMachine`): flags, or-ed together.
ARM = 1
"""Arm the lease's one event at `machine.armed_at` (not before `machine.early_at`)."""
DISARM = 2
"""Forget the armed event (it will never be needed)."""
RENEW = 4
"""Send a renewal of `machine.renew_ttl` now, bounded by the deadline."""
LOSE = 8
"""The lease is lost: abort its signal, then tell `on_lost`."""
REPORT = 16
"""A renewal failed (not a loss): tell `on_renew_error`."""
RELEASE = 32
"""Send the one release of this owner."""

_NEVER = float("inf")
RENEW_SLACK = 0.005
"""A renewal may be sent this much early (at most a tenth of its interval): renewals due
together are sent together, and the timer wakes once for them."""


def _slack(interval: float | None) -> float:
    return 0.0 if interval is None else min(RENEW_SLACK, interval / 10)


_DERIVED: dict[tuple[float, float | None], tuple[float, float]] = {}
"""`(safety_margin(ttl), _slack(interval))`, remembered for the few (ttl, interval) pairs in use."""
_DERIVED_MAX = 256


class LeaseMachine:
    """The state machine of one held lease: every decision after the acquisition, pure and lock-free.

    Inputs are methods taking `now` (and a store's answer); each returns the actions (flags
    above) the runtime performs. The runtime serialises inputs (a lock, or one event loop) and
    keeps one pending event per lease, which it re-arms when told (`ARM`); an event that fires
    early just re-arms. Nothing here reads a clock, sleeps or touches a store.

    - Deadline: send time of the last successful acquire/renew + ttl - `safety_margin(ttl)`.
      The store set the expiry to (its receive time + ttl), and receive time >= send time, so
      measuring from the send time can only err on the safe side.
      Replies can come back out of order (a renewal in flight while `extend` runs): a success
      sent before the previous success was answered may have reached the store before or
      after it, so the deadline is then the earlier of the two, never the later. Only
      `extend` changes the ttl (and scales the renewal interval with it).
    - Renewal: due `interval` after the last successful send; one at a time. After a failure,
      retried with exponential backoff (first 50 ms, never more than ttl/10), never at or after
      the deadline.
    - Loss (`LOSE`, once): the deadline passes (when `watch`), a renewal or extend answers
      False, a renewal is answered only after the deadline or times out, the body ends after
      the deadline, or the final release answers False.
    """

    __slots__ = (
        "_base_interval",
        "_base_ttl",
        "answered_at",
        "armed_at",
        "deadline",
        "early_at",
        "ended",
        "failures",
        "in_flight",
        "interval",
        "lost",
        "margin",
        "renew_at",
        "renew_ttl",
        "slack",
        "ttl",
        "watch",
    )

    def __init__(self, ttl: float, interval: float | None, *, watch: bool = True) -> None:
        self.ttl = self._base_ttl = self.renew_ttl = ttl
        derived = _DERIVED.get((ttl, interval))
        if derived is None:
            derived = (safety_margin(ttl), _slack(interval))
            if len(_DERIVED) < _DERIVED_MAX:  # bounded: leases of arbitrary ttls never grow it
                _DERIVED[ttl, interval] = derived
        self.margin, self.slack = derived
        self.interval = self._base_interval = interval
        self.watch = watch
        self.deadline = _NEVER
        self.answered_at = -_NEVER
        self.renew_at: float | None = None
        self.armed_at = self.early_at = _NEVER
        self.failures = 0
        self.in_flight = self.ended = self.lost = False

    # -- inputs ---------------------------------------------------------------------------------

    def acquired(self, sent_at: float, now: float) -> int:
        """The acquire sent at `sent_at` was granted, answered at `now`."""
        self.deadline = sent_at + self.ttl - self.margin
        self.answered_at = now
        self.renew_at = None if self.interval is None else sent_at + self.interval
        return self._arm()

    def tick(self, now: float) -> int:
        """The armed event fired: lose, renew, or re-arm."""
        self.armed_at = self.early_at = _NEVER
        if self.ended or self.lost:
            return 0
        if self.watch and now >= self.deadline:
            return self._lose()
        flags = 0
        renew_at = self.renew_at
        if renew_at is not None and not self.in_flight and now >= renew_at - self.slack:
            self.renew_at = None
            self.in_flight = True
            self.renew_ttl = self.ttl
            flags = RENEW
        return flags | self._arm()  # the deadline stays watched while a renewal is in flight

    def renew_answered(self, sent_at: float, now: float, ok: bool) -> int:
        """The renewal sent at `sent_at` answered `ok` at `now`."""
        self.in_flight = False
        if self.ended or self.lost:
            return 0  # in flight when the body ended, or after the loss: ignored
        if not ok or now >= self.deadline:
            return self._lose()
        self._succeeded(sent_at, now, self.renew_ttl)
        return self._arm()

    def renew_failed(self, now: float) -> int:
        """The renewal raised at `now` (a store error, not an answer): report it and retry."""
        self.in_flight = False
        if self.ended or self.lost:
            return 0
        self.failures += 1
        # Backoff, at most ttl/10, and never past the deadline: half the time left still leaves room for a reply.
        delay = min(self.ttl / 10, _RENEW_RETRY_FIRST * 2.0 ** min(self.failures - 1, 64), (self.deadline - now) / 2)
        self.renew_at = None if delay < _RENEW_RETRY_FLOOR else now + delay  # else the deadline decides
        return REPORT | self._arm()

    def renew_timed_out(self) -> int:
        """The renewal in flight ran out of the lease's time (its bound fired): lost."""
        self.in_flight = False
        return 0 if self.ended else self._lose()

    def extend_answered(self, sent_at: float, now: float, ttl: float, ok: bool) -> int:
        """The holder's `extend(ttl)` sent at `sent_at` answered `ok` at `now`."""
        if not ok:
            return self._lose()
        if self.lost:
            return 0
        if ttl != self.ttl:
            self.ttl = ttl
            self.margin = safety_margin(ttl)
            if self._base_interval is not None:  # the heartbeat keeps its ratio to the ttl
                self.interval = self._base_interval * min(1.0, ttl / self._base_ttl)
                self.slack = _slack(self.interval)
        self._succeeded(sent_at, now, ttl)
        return 0 if self.ended else self._arm()  # a shorter ttl pulls the deadline in

    def body_ended(self, now: float) -> int:
        """The body ended (`finish`): stop, check the deadline once more, release."""
        if self.ended:
            return 0
        flags = self._end()
        if self.watch and now >= self.deadline:
            flags |= self._lose()  # nothing when already lost
        return flags

    def holder_released(self) -> int:
        """The holder releases the lease itself (a primitive's `release()`)."""
        return 0 if self.ended else self._end()

    def release_answered(self, ok: bool) -> int:
        """The final release answered: False means someone else holds the key (lost)."""
        return 0 if ok else self._lose()

    # -- what an input decides ------------------------------------------------------------------

    def _succeeded(self, sent_at: float, now: float, ttl: float) -> None:
        deadline = sent_at + ttl - (self.margin if ttl == self.ttl else safety_margin(ttl))
        # Sent after every earlier success was answered, it acted last; else the store's order is
        # unknown: the earlier of the two.
        if sent_at >= self.answered_at or deadline < self.deadline:
            self.deadline = deadline
        self.answered_at = max(self.answered_at, now)
        self.failures = 0
        self.renew_at = None if self.interval is None else sent_at + self.interval

    def _arm(self) -> int:
        """Arm the earlier of the next renewal and (when watched) the deadline, if not armed before it."""
        renew_at = self.renew_at
        target = _NEVER if renew_at is None or self.in_flight else renew_at
        early = target - self.slack  # never minus the slack is still never
        if self.watch and self.deadline <= target:
            target = early = self.deadline
        if target >= self.armed_at:
            return 0  # an earlier event is armed: it fires, finds nothing to do, and re-arms
        self.armed_at = target
        self.early_at = early
        return ARM

    def _end(self) -> int:
        self.ended = True
        return RELEASE | self._disarm()

    def _lose(self) -> int:
        if self.lost:
            return 0
        self.lost = True
        return LOSE | self._disarm()

    def _disarm(self) -> int:
        if self.armed_at == _NEVER:
            return 0
        self.armed_at = self.early_at = _NEVER
        return DISARM
