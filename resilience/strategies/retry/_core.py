"""The retry strategy's decisions, as pure code: no clock, no sleep, no I/O.

`RetryCore.next_delay(outcome handled?, attempt, aborted?)` says whether to retry and the
backoff before it; the sync and async shells in `_strategy.py` only call, sleep and report.
Delays follow Polly v8 (`RetryHelper`): constant `delay`, linear `delay * (attempt + 1)`,
exponential `delay * 2**attempt`; jitter is ±25% for constant and linear, and Polly's
decorrelated jitter (`DecorrelatedJitterBackoffV2`) for exponential.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, TypeAlias

from resilience._validation import MAX_DURATION, generated_seconds

if TYPE_CHECKING:
    from random import Random

    from resilience.strategies._common import Handler

__all__ = ["Backoff", "RetryCore", "decorrelated_jitter"]

Backoff: TypeAlias = Literal["constant", "linear", "exponential"]

_JITTER_FACTOR = 0.5  # Polly: the jittered delay lies in [delay * 0.75, delay * 1.25)
_P_FACTOR = 4.0  # Polly's DecorrelatedJitterBackoffV2 coefficients
_RP_SCALING_FACTOR = 1 / 1.4


def decorrelated_jitter(attempt: int, base: float, previous: float, uniform: float) -> tuple[float, float]:
    """Decorrelated jitter on Polly's `DecorrelatedJitterBackoffV2` curve: (delay, next state).

    `uniform` is a draw from [0, 1); `previous` starts at 0.0. Each delay is the difference of a
    smooth curve sampled at jittered points. Polly's first retry has its median near `base`, but
    later ones near `base * 2**(attempt - 1)`, half the un-jittered value; this library keeps
    the median near `base * 2**attempt` at every attempt, so retries after the first are scaled
    by 2 (the shape, and so the decorrelation, is Polly's).
    """
    t = attempt + uniform
    try:
        following = math.pow(2, t) * math.tanh(math.sqrt(_P_FACTOR * t))
    except OverflowError:
        return MAX_DURATION, math.inf
    if math.isinf(previous):
        return MAX_DURATION, previous
    delay = (following - previous) * _RP_SCALING_FACTOR * base * (2.0 if attempt > 0 else 1.0)
    return min(max(delay, 0.0), MAX_DURATION), following


@dataclass(frozen=True, slots=True, kw_only=True, eq=False)
class RetryCore:
    """Pure retry decisions for one set of options (shared by every execution)."""

    max_retries: int
    delay: float
    backoff: Backoff
    jitter: bool
    max_delay: float | None
    handler: Handler
    random: Random

    def should_retry(self, *, handled: bool, attempt: int, aborted: bool) -> bool:
        """Retry after attempt `attempt` (0-based) ended this way?"""
        return handled and attempt < self.max_retries and not aborted

    def backoff_delay(self, attempt: int, state: float = 0.0) -> tuple[float, float]:
        """The backoff delay after attempt `attempt`, capped by `max_delay`, and the jitter state.

        `state` carries the decorrelated jitter's memory from one retry to the next (start
        with 0.0, pass back what the previous call returned).
        """
        base = self.delay
        if self.backoff == "exponential":
            if self.jitter:
                delay, state = decorrelated_jitter(attempt, base, state, self.random.random())
            else:
                try:
                    delay = base * math.pow(2, attempt)
                except OverflowError:
                    delay = MAX_DURATION
        else:
            delay = base * (attempt + 1) if self.backoff == "linear" else base
            if self.jitter:
                delay += delay * _JITTER_FACTOR * self.random.random() - delay * _JITTER_FACTOR / 2
        return self.cap(delay), state

    def cap(self, delay: float) -> float:
        """`delay` within [0, max_delay] and never above `MAX_DURATION` (what a wait accepts)."""
        limit = self.max_delay
        return limit if limit is not None and delay > limit else min(max(delay, 0.0), MAX_DURATION)

    def generated_delay(self, generated: object, backoff: float) -> float:
        """The delay to use when `delay_generator` returned `generated` (None: the backoff)."""
        expected = "seconds (float), a timedelta, or None"
        return self.cap(generated_seconds(generated, backoff, "delay_generator", expected))
