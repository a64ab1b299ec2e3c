"""The hedging strategy's decisions, as pure code: no clock, no thread, no task.

One `HedgingState` per execution follows Polly v8's hedging loop. Attempt 0 is the original
call; after each launch the shell asks for the delay before the next one, and then either an
attempt ends (`ended`) or that delay passes (`delay_passed`). The state answers what to do:
launch the next attempt now, keep waiting, or finish with an outcome.

- An outcome that is not handled wins at once.
- A handled outcome launches the next attempt at once, if any is left and the caller has not
  aborted; once none is left and nothing runs, the original call's outcome (attempt 0's) is
  the answer, as in Polly.
- A delay that passes launches the next attempt (`delay=0`: all at once; `math.inf`, or a
  negative delay from `delay_generator`: never, only after a handled outcome: Polly's fallback
  mode).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from resilience._validation import generated_seconds

if TYPE_CHECKING:
    from resilience._outcome import Outcome

__all__ = ["HedgingState", "generated_delay"]


def generated_delay(generated: object, default: float) -> float:
    """The delay to use when `delay_generator` returned `generated` (None: `default`).

    A negative delay means "no delay-driven launch" (`math.inf`), as in Polly, where a negative
    hedging delay is its fallback mode: a generator's "never" sentinel must not become 0 and
    launch every attempt at once.
    """
    expected = "seconds (float, math.inf allowed), a timedelta, or None"
    seconds = generated_seconds(generated, default, "delay_generator", expected)
    return math.inf if seconds < 0 else seconds


class HedgingState:
    """Where one hedged execution stands: attempts launched, running, and the answer once known."""

    __slots__ = ("_last", "_last_wins", "_original", "_total", "due", "final", "finished", "launched", "running")

    def __init__(self, max_hedged_attempts: int, *, last_wins: bool = False) -> None:
        self._total = max_hedged_attempts + 1
        self._last_wins = last_wins  # every attempt handled: the last one's outcome, not the original's
        self.launched = 0
        """How many attempts were started (the next attempt's number)."""
        self.running: set[int] = set()
        self.due = False
        """A launch is due now (a handled outcome, or a delay passed)."""
        self.finished = False
        self.final: Outcome[Any] | None = None
        """The answer, once `finished` (None when it finished on a `BaseException`)."""
        self._last: Outcome[Any] | None = None
        self._original: Outcome[Any] | None = None  # attempt 0's handled outcome

    @property
    def can_launch(self) -> bool:
        """Whether an attempt is left to launch."""
        return not self.finished and self.launched < self._total

    def launch(self) -> int:
        """Record the start of the next attempt and return its number."""
        attempt = self.launched
        self.launched += 1
        self.running.add(attempt)
        self.due = False
        return attempt

    def take_due(self) -> int | None:
        """If a launch is due and allowed, record it and return the attempt number."""
        if self.due and self.can_launch:
            return self.launch()
        self.due = False
        return None

    def wait_after_launch(self, attempt: int, delay: float) -> float | None:
        """After `attempt` started, how long to wait for an end before the next launch (None: no limit).

        `delay` is the hedging delay for the next attempt; 0 makes the next launch due now. Only
        the newest attempt arms a delay: if the next one already started, there is none to arm.
        """
        if self.launched != attempt + 1 or not self.can_launch or math.isinf(delay):
            return None
        if delay <= 0:
            self.due = True
            return 0.0
        return delay

    def delay_passed(self, attempt: int, *, aborted: bool) -> bool:
        """The delay armed before attempt `attempt` passed; True if that launch is now due."""
        if aborted or self.launched != attempt or not self.can_launch:
            return False  # stale (a handled outcome already launched it), or nothing left
        self.due = True
        return True

    def ended(self, attempt: int, outcome: Outcome[Any], *, handled: bool, aborted: bool) -> bool:
        """Attempt `attempt` ended with `outcome`; True if this made the execution finish.

        `aborted`: the caller's signal has aborted (no attempt may start any more). An attempt
        that ends after the execution finished (a loser) changes nothing.
        """
        self.running.discard(attempt)
        if self.finished:
            return False
        if not handled:
            self._finish(outcome)
            return True
        self._last = outcome
        if attempt == 0 and not self._last_wins:
            self._original = outcome
        if not aborted and self.launched < self._total:
            self.due = True
            return False
        if not self.running:  # every attempt was handled: the original call's outcome, as in Polly
            self._finish(outcome if self._original is None else self._original)
            return True
        return False

    def ended_fatally(self, attempt: int) -> bool:
        """Attempt `attempt` ended with a `BaseException` (never handled): finish on it."""
        self.running.discard(attempt)
        if self.finished:
            return False
        self._finish(None)
        return True

    def abandoned(self, attempt: int) -> bool:
        """A launched attempt never started (the execution finished, or the caller aborted, first).

        True if this made the execution finish: nothing runs any more, and every attempt that
        ran was handled, so the answer is as in `ended` (the original call's, as in Polly).
        """
        self.running.discard(attempt)
        if self.finished or self.running or self._last is None:
            return False
        self._finish(self._last if self._original is None else self._original)
        return True

    def _finish(self, outcome: Outcome[Any] | None) -> None:
        self.finished = True
        self.final = outcome
        self.due = False

    @property
    def settled(self) -> bool:
        """Finished, and no attempt runs any more: the execution may return."""
        return self.finished and not self.running
