"""The circuit breaker's state machine, as pure code: every method takes `now`, none sleeps.

Polly v8's advanced breaker. A rolling window of `sampling_duration` split in ten buckets
counts successes and handled failures while the circuit is closed; it opens when at least
`minimum_throughput` calls were seen and the failure ratio reached `failure_ratio`. With
`consecutive_failures`, a `ConsecutiveFailures` count takes the window's place (pybreaker's
`fail_max`, Polly v7's basic breaker): it opens after that many handled failures in a row. Open, it
rejects until `blocked_until`; the first call after that turns it half-open and is the one
probe (a probe still running after another break duration no longer holds the slot, as in
Polly, so a hung probe cannot keep the circuit half-open forever). A handled failure of the
probe re-opens the circuit, anything else closes it.

Every transition bumps `generation`; a call's outcome counts only if the generation it was
admitted under is still current. The class is not thread-safe: `CircuitController` calls it
under its lock and emits the returned `Transition`s after releasing it.
"""

from __future__ import annotations

import enum
import itertools
import math
from collections import deque
from dataclasses import KW_ONLY, dataclass

from resilience.exceptions import BrokenCircuitError, IsolatedCircuitError

__all__ = ["Bucket", "CircuitCore", "CircuitState", "ConsecutiveFailures", "RollingWindow", "Transition"]

_BUCKETS = 10


class CircuitState(enum.Enum):
    """The state of a circuit (`CircuitBreakerStateProvider().state`)."""

    CLOSED = "Closed"
    """Calls flow; outcomes are sampled."""
    OPEN = "Open"
    """Calls are rejected with `BrokenCircuitError` until the break ends."""
    HALF_OPEN = "HalfOpen"
    """One probe call is let through; its outcome closes or re-opens the circuit."""
    ISOLATED = "Isolated"
    """Held open by hand (`CircuitBreakerManualControl.isolate()`): `IsolatedCircuitError`."""


@dataclass(slots=True, repr=False, eq=False)
class Transition:
    """A state change to report: the new `state`, why, and (when opening) the window's health."""

    state: CircuitState
    generation: int
    _: KW_ONLY
    is_manual: bool = False
    failure_rate: float = 0.0
    failure_count: int = 0
    break_duration: float | None = None
    """An opening's break in seconds (`inf` when isolated by hand); None while a break duration generator decides it."""

    def __repr__(self) -> str:
        return f"Transition({self.state.name}, generation={self.generation}, manual={self.is_manual})"


class Bucket:
    """One tenth of the window: its start, and the outcomes counted in it.

    Successes are an `itertools.count`, whose step is one C call (atomic under the GIL), so a
    closed circuit's success is counted without the controller's lock
    (`CircuitBreakerStrategy.execute`). Reading the count steps it too: `reads` (kept under the
    lock) says how many of its steps were reads.
    """

    __slots__ = ("failures", "reads", "start", "successes")

    def __init__(self, start: float) -> None:
        self.start = start
        self.successes = itertools.count()
        self.reads = 0
        self.failures = 0


class RollingWindow:
    """Successes and failures over the last `sampling_duration` seconds, in ten buckets.

    `current` and `width` are read without the lock by a success: a bucket that was current
    at its `now` is the right one to count it in, and one detached meanwhile (a reset, or
    expired) would not have counted it either.
    """

    __slots__ = ("_buckets", "_failure_ratio", "_minimum_throughput", "_sampling", "current", "width")

    def __init__(self, sampling_duration: float, failure_ratio: float, minimum_throughput: int) -> None:
        self._failure_ratio = failure_ratio
        self._minimum_throughput = minimum_throughput
        self._sampling = sampling_duration
        self.width = sampling_duration / _BUCKETS
        self._buckets: deque[Bucket] = deque()
        self.current: Bucket | None = None

    def _current(self, now: float) -> Bucket:
        bucket = self.current
        if bucket is None or now - bucket.start >= self.width:
            bucket = Bucket(now)
            self._buckets.append(bucket)
            self._expire(now)  # only a new bucket can push an old one out
            self.current = bucket  # published whole: a success reads it without the lock
        return bucket

    def _expire(self, now: float) -> None:
        buckets = self._buckets
        while buckets and now - buckets[0].start >= self._sampling:
            buckets.popleft()
        if not buckets:
            self.current = None

    def success(self, now: float) -> None:
        """Count a success (or an unhandled failure)."""
        bucket = self.current
        if bucket is None or now - bucket.start >= self.width:
            bucket = self._current(now)
        next(bucket.successes)

    def failure(self, now: float) -> None:
        """Count a handled failure."""
        self._current(now).failures += 1

    def health(self, now: float) -> tuple[int, int]:
        """`(throughput, failures)` within the window ending at `now`."""
        self._expire(now)
        total = failures = 0
        for bucket in self._buckets:
            total += next(bucket.successes) - bucket.reads + bucket.failures
            bucket.reads += 1  # the read above stepped the count
            failures += bucket.failures
        return total, failures

    def tripped(self, now: float) -> bool:
        """Whether the window's health opens the circuit (checked after a handled failure)."""
        total, failures = self.health(now)
        return total >= self._minimum_throughput and failures / total >= self._failure_ratio

    def reset(self) -> None:
        """Forget everything (the circuit closed)."""
        self._buckets.clear()
        self.current = None


class ConsecutiveFailures:
    """Handled failures in a row: any success (or unhandled outcome) starts the count again.

    In a local circuit the count is never zero while half-open (its opening took at least one
    failure, and only a close or a closed-state success resets it), so a success that reads
    a zero count has nothing to change, whatever the state (`CircuitBreakerStrategy.execute`).
    A shared circuit may half-open on the fleet's failures, with none counted here.
    """

    __slots__ = ("_threshold", "count")

    def __init__(self, threshold: int) -> None:
        self._threshold = threshold
        self.count = 0

    def success(self, now: float) -> None:  # noqa: ARG002 - the window's shape: time does not matter here
        """A success ends the run of failures."""
        self.count = 0

    def failure(self, now: float) -> None:  # noqa: ARG002
        """One more handled failure in a row."""
        self.count += 1

    def health(self, now: float) -> tuple[int, int]:  # noqa: ARG002
        """`(failures in a row, failures in a row)`: the opening's failure rate reads 1.0."""
        return self.count, self.count

    def tripped(self, now: float) -> bool:  # noqa: ARG002
        """Whether the run of failures reached the threshold."""
        return self.count >= self._threshold

    def reset(self) -> None:
        """Start counting again (the circuit closed)."""
        self.count = 0


class CircuitCore:
    """The state machine of one circuit. `state`, `generation` and `ticket` may be read without the lock."""

    __slots__ = (
        "_blocked_until",
        "_opened_at",
        "_probe_until",
        "break_duration",
        "generation",
        "rule",
        "state",
        "ticket",
        "window",
    )

    def __init__(
        self,
        *,
        failure_ratio: float,
        minimum_throughput: int,
        sampling_duration: float,
        break_duration: float,
        consecutive_failures: int | None = None,
    ) -> None:
        self.break_duration = break_duration
        """The configured break duration, in seconds."""
        self.rule = (failure_ratio, minimum_throughput, sampling_duration)  # as configured: what a shared circuit sends
        self.window: RollingWindow | ConsecutiveFailures = (
            RollingWindow(sampling_duration, failure_ratio, minimum_throughput)
            if consecutive_failures is None
            else ConsecutiveFailures(consecutive_failures)
        )
        self.generation = 0
        self.state = CircuitState.CLOSED
        self.ticket: int | None = 0
        """The generation while closed, else None: a closed call's admission and its check, in one read."""
        self._blocked_until: float | None = None  # None while open: the break is still being decided
        self._opened_at = 0.0
        self._probe_until: float | None = None  # half-open: until when the probe holds its slot
        self._post_init()

    def _post_init(self) -> None:
        """The state a subclass keeps beside the circuit's (one constructor for every core)."""

    # -- transitions ---------------------------------------------------------------------------

    def _move(self, state: CircuitState) -> int:
        self.state = state
        self.generation += 1
        self._blocked_until = self._probe_until = None  # the new state sets what it keeps
        self.ticket = self.generation if state is CircuitState.CLOSED else None
        return self.generation

    def _open(
        self, now: float, *, pending: bool = False, manual: bool = False, known: float | None = None
    ) -> Transition:
        """Open (isolate, if `manual`); `known`: the break the fleet decided; `pending`: the generator decides it."""
        total, failures = self.window.health(now)
        generation = self._move(CircuitState.ISOLATED if manual else CircuitState.OPEN)
        self._opened_at = now
        seconds = self.break_duration if known is None else known
        self._blocked_until = None if pending or manual else now + seconds
        return Transition(
            self.state,
            generation,
            is_manual=manual,
            failure_rate=failures / total if total else 0.0,
            failure_count=failures,
            break_duration=None if pending else math.inf if manual else seconds,
        )

    def _half_open(self, probe_until: float | None) -> tuple[int, Transition]:
        """Half-open, the probe holding its slot until `probe_until`: `(ticket, transition)`."""
        generation = self._move(CircuitState.HALF_OPEN)
        self._probe_until = probe_until
        return generation, Transition(CircuitState.HALF_OPEN, generation)

    def _close(self, *, manual: bool = False) -> Transition:
        generation = self._move(CircuitState.CLOSED)
        self.window.reset()
        return Transition(CircuitState.CLOSED, generation, is_manual=manual)

    # -- calls ---------------------------------------------------------------------------------

    def admit(self, now: float) -> tuple[int, Transition | None]:
        """Let a call through: `(ticket, half-open transition or None)`; raise if rejected."""
        state = self.state
        if state is CircuitState.CLOSED:
            return self.generation, None
        if state is CircuitState.ISOLATED:
            raise IsolatedCircuitError
        if state is CircuitState.OPEN:
            blocked_until = self._blocked_until
            if blocked_until is None or now < blocked_until:
                raise BrokenCircuitError(retry_after=None if blocked_until is None else blocked_until - now)
            return self._half_open(now + self.break_duration)
        probe_until = self._probe_until
        if probe_until is not None and now < probe_until:
            raise BrokenCircuitError("the circuit is half-open and its probe is running", retry_after=probe_until - now)
        self._probe_until = now + self.break_duration
        return self.generation, None

    def record(self, now: float, ticket: int, *, handled: bool, pending_break: bool = False) -> Transition | None:
        """The call admitted with `ticket` ended (`handled`: a handled failure); the transition, if any.

        `pending_break`: opening waits for `set_break` (a break duration generator runs first).
        """
        if ticket != self.generation:
            return None  # the circuit changed state since the call started: it does not count
        state = self.state
        if state is CircuitState.CLOSED:
            window = self.window
            if not handled:
                window.success(now)
                return None
            window.failure(now)
            return self._open(now, pending=pending_break) if window.tripped(now) else None
        if state is CircuitState.HALF_OPEN:
            return self._open(now, pending=pending_break) if handled else self._close()
        return None  # pragma: no cover - open and isolated circuits admit nobody under their generation

    def release(self, ticket: int) -> None:
        """The call admitted with `ticket` ended with a `BaseException`: free the probe slot."""
        if ticket == self.generation and self.state is CircuitState.HALF_OPEN:
            self._probe_until = None

    def set_break(self, generation: int, duration: float) -> float:
        """Set the break of the opening `generation` to `duration`; return the seconds it lasts."""
        duration = max(duration, 0.0) if math.isfinite(duration) else self.break_duration
        if generation == self.generation and self.state is CircuitState.OPEN:
            self._blocked_until = self._opened_at + duration
        return duration

    # -- manual control ------------------------------------------------------------------------

    def isolate(self, now: float) -> Transition | None:
        """Hold the circuit open until `close()`; None if it already was isolated."""
        return None if self.state is CircuitState.ISOLATED else self._open(now, manual=True)

    def close(self) -> Transition | None:
        """Close the circuit by hand; None if it already was closed."""
        return None if self.state is CircuitState.CLOSED else self._close(manual=True)
