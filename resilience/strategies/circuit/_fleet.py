"""A circuit shared by a fleet, as pure code: the local state machine plus what the fleet says.

`SharedCircuitCore` is a `CircuitCore` whose opening and half-open probe are decided by the
shared state (a Redis hash, `resilience.stores.RedisCircuitStateStore`), not by this process:

- Closed, it counts outcomes in its own window (for the day the store is unreachable) and in
  `unsent_successes`/`unsent_failures`, which the background sync sends in one batch; the
  store adds every process's batches to one window and opens the circuit for the fleet.
- Open, it rejects until the fleet grants this process the probe. The sync claims the probe
  shortly before the break ends (the store grants it to one process, usable from the break's
  end), and the holder renews an unused grant while no other process asks for it: the first
  call after the break is the probe, however sparse the traffic. A call rejected while another
  process holds the probe sets `probe_wanted`, which the sync sends as a claim: the holder may
  then no longer renew, so a process without traffic cannot keep the fleet's probe. The probe's
  outcome goes back as a command.
- Manual `isolate()`/`close()` and the probe's outcome are queued in `outbox` for the sync.
- `apply(...)` takes the store's answer and returns the transition this process sees (one
  event per transition learned); `go_local()` makes it a plain local circuit while the store
  cannot be reached, `go_shared()` hands the decisions back when it answers again.

Every method takes `now` (this process's monotonic clock); the store converts its server-time
deadlines to "seconds from now" so no two clocks are ever compared. Not thread-safe: the
controller calls it under its lock.
"""

from __future__ import annotations

import enum

from resilience.exceptions import BrokenCircuitError
from resilience.strategies.circuit._core import CircuitCore, CircuitState, RollingWindow, Transition

__all__ = ["Command", "SharedCircuitCore", "StateCode"]

_CLOSED = CircuitState.CLOSED
_OPEN = CircuitState.OPEN
_HALF_OPEN = CircuitState.HALF_OPEN
_ISOLATED = CircuitState.ISOLATED


class StateCode(enum.IntEnum):
    """The state as the store keeps it (numbers only, in Lua), by the names of `CircuitState`."""

    CLOSED = 0
    OPEN = 1
    HALF_OPEN = 2
    ISOLATED = 3


class Command(enum.IntEnum):
    """What a sync asks the store to do besides adding counts (one per round trip)."""

    NONE = 0
    CLAIM_PROBE = 1
    """Open and its break is over: may this process send the one probe?"""
    PROBE_SUCCEEDED = 2
    """Our probe ended well: close the circuit (if it is still the probe's epoch)."""
    PROBE_FAILED = 3
    """Our probe was a handled failure: open it again for a break."""
    ISOLATE = 4
    CLOSE = 5
    """Closed by hand."""
    OPEN = 6
    """This process opened the circuit on its own while the store was unreachable."""
    RENEW_PROBE = 7
    """We hold the fleet's probe and have not used it yet: keep it (unless someone else asked)."""


_MANUAL = (Command.ISOLATE, Command.CLOSE)


class SharedCircuitCore(CircuitCore):
    """A circuit whose openings and probes the fleet decides (see the module docstring)."""

    __slots__ = (
        "_granted_until",
        "_interested",
        "_last_command",
        "_probe_mine",
        "_resync",
        "counts_shared",
        "outbox",
        "probe_wanted",
        "remote_epoch",
        "shared",
        "unsent_failures",
        "unsent_successes",
    )

    def _post_init(self) -> None:
        """The fleet's state beside the local circuit's (the constructor is `CircuitCore`'s)."""
        self.counts_shared = type(self.window) is RollingWindow
        """A ratio is the fleet's; a run of failures in a row is each process's own (it opens for all)."""
        self.shared = True
        """False while the store is unreachable: the circuit decides alone (a local circuit)."""
        self.remote_epoch = 0
        """The store's epoch this circuit last agreed with (bumped by every fleet transition)."""
        self.unsent_successes = 0
        self.unsent_failures = 0
        self.probe_wanted = False
        self.outbox: list[tuple[Command, int, float]] = []
        """Commands for the store: (command, the epoch it applies to, break seconds)."""
        self._granted_until: float | None = None  # the fleet's probe is ours until then
        self._probe_mine = False
        self._resync = False  # the next answer wins over whatever was decided locally meanwhile
        self._last_command = Command.NONE  # what the exchange being answered carried
        # A call was rejected here since the last grant: this process has traffic to probe with.
        self._interested = False

    # -- what the sync sends ---------------------------------------------------------------------

    def take_batch(self, now: float, interval: float) -> tuple[int, int, Command, int, float]:
        """Counts and one command to send now: `(successes, failures, command, epoch, seconds)`.

        The counts are reset (a failed send loses them: they are not worth a second trip).
        `interval`: the sync's; a probe is claimed when the break ends before the next sync.
        """
        successes, failures = self.unsent_successes, self.unsent_failures
        self.unsent_successes = self.unsent_failures = 0
        command, epoch, seconds = Command.NONE, self.remote_epoch, 0.0
        if self.outbox:
            command, epoch, seconds = self.outbox.pop(0)
        elif self.shared:
            command = self._probe_command(now, interval)
            self.probe_wanted = False
        self._last_command = command
        return successes, failures, command, epoch, seconds

    def _probe_command(self, now: float, interval: float) -> Command:
        """Claim the fleet's probe when due (or wanted), renew it while it is ours and unused."""
        state = self.state
        granted = self._granted_until
        if granted is not None and now < granted:
            unused = state is _OPEN or (state is _HALF_OPEN and self._probe_mine and self._probe_until is None)
            return Command.RENEW_PROBE if unused else Command.NONE
        self._granted_until = None  # none, or it ran out
        if state is _OPEN:
            blocked_until = self._blocked_until
            due = blocked_until is not None and now >= blocked_until - interval
            return Command.CLAIM_PROBE if due or self.probe_wanted else Command.NONE
        if state is _HALF_OPEN and not self._probe_mine:
            # Another process holds the probe: claim when asked by a call, and again once its
            # lease has run out if calls were rejected here (an idle holder gave it up).
            probe_until = self._probe_until
            over = probe_until is None or now >= probe_until
            return Command.CLAIM_PROBE if self.probe_wanted or (over and self._interested) else Command.NONE
        return Command.CLAIM_PROBE if state is _HALF_OPEN and self.probe_wanted else Command.NONE

    def known(self, now: float) -> tuple[StateCode, float]:
        """What this process believes, so that a store that lost its data gets it back."""
        state = self.state
        if state is _OPEN and self._granted_until is not None and now < self._granted_until:
            return StateCode.HALF_OPEN, 0.0  # the fleet's probe is ours
        blocked_until = self._blocked_until if state is _OPEN else None
        return StateCode[state.name], 0.0 if blocked_until is None else max(0.0, blocked_until - now)

    def _send(self, command: Command, seconds: float = 0.0) -> None:
        if command in _MANUAL:  # only the last manual move matters
            self.outbox = [entry for entry in self.outbox if entry[0] not in _MANUAL]
        self.outbox.append((command, self.remote_epoch, seconds))

    # -- calls -----------------------------------------------------------------------------------

    def admit(self, now: float) -> tuple[int, Transition | None]:
        """As `CircuitCore.admit`, except that a shared circuit probes only when the fleet says so."""
        state = self.state
        if not self.shared or state is _CLOSED or state is _ISOLATED:
            return super().admit(now)
        granted = self._granted_until
        mine = granted is not None and now < granted
        if state is _OPEN:
            blocked_until = self._blocked_until
            if blocked_until is not None and now < blocked_until:
                self._interested = True
                raise BrokenCircuitError(retry_after=blocked_until - now)
            if mine:
                self._probe_mine = True
                return self._half_open(granted)
            self.probe_wanted = self._interested = True  # the break is over: ask the fleet for the probe
            raise BrokenCircuitError(retry_after=None)
        probe_until = self._probe_until
        if self._probe_mine and mine and probe_until is None:  # our probe's slot was freed
            self._probe_until = granted
            return self.generation, None
        left = None if probe_until is None or now >= probe_until else probe_until - now
        if left is None or not self._probe_mine:
            # Ask: a lease that ran out is granted again, and a holder without traffic cannot
            # keep the fleet's probe once another process has asked for it.
            self.probe_wanted = True
        self._interested = True
        raise BrokenCircuitError("the circuit is half-open and its probe is running", retry_after=left)

    def record(self, now: float, ticket: int, *, handled: bool, pending_break: bool = False) -> Transition | None:
        """Count an outcome; shared, the window only counts (the fleet decides openings)."""
        if ticket != self.generation:
            return None
        state = self.state
        if state is _CLOSED and self.counts_shared:
            if handled:
                self.unsent_failures += 1
            else:
                self.unsent_successes += 1
            if self.shared:
                if handled:
                    self.window.failure(now)
                else:
                    self.window.success(now)
                return None
        if state is _HALF_OPEN and self.shared:
            self._granted_until = None
            self._probe_mine = False
            self._send(Command.PROBE_FAILED if handled else Command.PROBE_SUCCEEDED)
            # Re-opened for the fleet's break (no generator).
            return self._open(now) if handled else self._close()
        transition = super().record(now, ticket, handled=handled, pending_break=pending_break)
        # Opened from closed by this process (alone, or on its own run of failures): tell the fleet.
        if state is _CLOSED and transition is not None:
            self._send(Command.OPEN, self.break_duration)
        return transition

    # -- manual control --------------------------------------------------------------------------

    def isolate(self, now: float) -> Transition | None:
        """Isolate here at once and tell the fleet."""
        self._send(Command.ISOLATE)
        return super().isolate(now)

    def close(self) -> Transition | None:
        """Close here at once and tell the fleet."""
        self._send(Command.CLOSE)
        return super().close()

    # -- what the fleet says ---------------------------------------------------------------------

    def apply(
        self,
        now: float,
        code: StateCode,
        epoch: int,
        remaining: float,
        *,
        manual: bool = False,
        granted: bool = False,
        wait: float = 0.0,
    ) -> Transition | None:
        """The store's state after a sync; the transition this process now sees, if any.

        `remaining`: seconds until the break ends (open) or the probe's lease ends (half-open);
        `wait`: seconds until a probe granted before the break's end may start.

        Invariant: after an answer with nothing left to send, this process's state is the
        fleet's (an unused probe of ours counts as the fleet's half-open).
        """
        if self.outbox or not self.shared:
            return None  # our own command is still on its way: its answer will be the truth
        resync, self._resync = self._resync, False
        state = self.state
        target = CircuitState[code.name]
        if epoch == self.remote_epoch and not resync and self._agrees(now, target, remaining, granted=granted):
            return None
        self.remote_epoch = epoch
        self.unsent_successes = self.unsent_failures = 0  # counted under an epoch that is over
        self._probe_mine = False
        self._granted_until = None
        if target is _CLOSED:
            self.window.reset()  # afresh, also if closed here: the fleet may have opened and closed meanwhile
            return None if state is _CLOSED else self._close(manual=manual)
        if target is _ISOLATED:
            return None if state is _ISOLATED else self._open(now, manual=True)
        if target is _HALF_OPEN and granted:
            self._granted_until = now + remaining  # the next call is the fleet's probe
            self._interested = False
            if state is _HALF_OPEN:  # the previous probe's lease ran out: a new one, ours
                self._probe_mine = True
                self._probe_until = None
                return None
            transition = None if state is _OPEN else self._open(now, known=0.0)  # no break left to report
            self._blocked_until = now + wait
            return transition
        if target is _HALF_OPEN:  # someone else's probe, until its lease ends
            transition = None if state is _HALF_OPEN else self._half_open(now + remaining)[1]
            self._probe_until = now + remaining
            return transition
        transition = None if state is _OPEN else self._open(now, manual=manual, known=remaining)
        self._blocked_until = now + remaining  # isolated too
        return transition

    def _agrees(self, now: float, target: CircuitState, remaining: float, *, granted: bool) -> bool:
        """An answer at the epoch we know: take its times; False if its state is not ours.

        The same epoch in another state means a command of ours was refused (a probe's outcome
        after the store lost the probe, say): then the fleet's state wins.
        """
        state = self.state
        if self._last_command is Command.RENEW_PROBE and self._granted_until is not None:
            self._granted_until = now + remaining if granted else None
        if target is _OPEN and state is _OPEN:
            self._blocked_until = now + remaining
        elif target is _HALF_OPEN and state is _HALF_OPEN and not self._probe_mine:
            self._probe_until = now + remaining
        return target is state or (target is _HALF_OPEN and state is _OPEN and self._granted_until is not None)

    def go_local(self, now: float) -> Transition | None:
        """The store is unreachable: decide alone until `go_shared()`.

        What the window counted while shared counts now: the opening, if it meets the rule.
        """
        if not self.shared:
            return None
        self.shared = self.probe_wanted = self._probe_mine = False
        self._granted_until = None
        if self.state is not _CLOSED or not self.window.tripped(now):
            return None
        self._send(Command.OPEN, self.break_duration)
        return self._open(now)

    def go_shared(self) -> None:
        """The store answers again: its next answer wins over what was decided alone meanwhile."""
        if not self.shared:
            self.shared = True
            self._resync = True
