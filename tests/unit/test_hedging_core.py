"""Hedging decisions without a loop, a thread or a clock (`HedgingState`, `generated_delay`)."""

from __future__ import annotations

import datetime as dt
import math

import pytest

from resilience import Err, Ok, ValidationError
from resilience.strategies.hedging._core import HedgingState, generated_delay

FAILED = Err(ConnectionError())


def started(max_hedged_attempts: int = 2) -> HedgingState:
    state = HedgingState(max_hedged_attempts)
    assert state.launch() == 0
    return state


def test_an_unhandled_outcome_wins_at_once() -> None:
    """The first outcome that is not handled finishes the execution, others still running."""
    state = started()
    state.delay_passed(1, aborted=False)
    assert state.take_due() == 1
    assert state.ended(1, Ok("fast"), handled=False, aborted=False)
    assert state.finished
    assert state.final == Ok("fast")
    assert not state.settled  # attempt 0 still runs
    assert not state.ended(0, Ok("slow"), handled=False, aborted=False)  # a loser changes nothing
    assert state.final == Ok("fast")
    assert state.settled


def test_a_handled_outcome_makes_the_next_attempt_due_at_once() -> None:
    """Polly's loop: after a handled outcome the next attempt starts without waiting for a delay."""
    state = started()
    assert not state.ended(0, FAILED, handled=True, aborted=False)
    assert state.take_due() == 1
    assert state.take_due() is None


def test_when_every_attempt_is_handled_the_last_outcome_is_the_answer() -> None:
    """All handled: finish with the last one, only once nothing runs any more."""
    state = started(1)
    state.delay_passed(1, aborted=False)
    assert state.take_due() == 1
    last = Err(TimeoutError())
    assert not state.ended(1, FAILED, handled=True, aborted=False)
    assert state.take_due() is None  # nothing left to launch
    assert state.ended(0, last, handled=True, aborted=False)
    assert state.final is last
    assert state.settled


def test_delays_make_launches_due_only_when_fresh() -> None:
    """A delay that passes after a handled outcome already launched that attempt is stale."""
    state = started()
    assert state.wait_after_launch(0, 0.5) == 0.5
    state.ended(0, FAILED, handled=True, aborted=False)
    assert state.take_due() == 1
    assert not state.delay_passed(1, aborted=False)  # stale
    assert state.delay_passed(2, aborted=False)
    assert state.take_due() == 2
    assert not state.can_launch
    assert not state.delay_passed(3, aborted=False)


def test_parallel_fallback_and_latency_modes() -> None:
    """`delay=0` makes the next launch due now; `math.inf` waits for an end; all launched: no limit."""
    state = started(1)
    assert state.wait_after_launch(0, 0.0) == 0.0
    assert state.take_due() == 1
    assert state.wait_after_launch(1, 0.0) is None  # nothing left: wait for an end
    fallback = started(1)
    assert fallback.wait_after_launch(0, math.inf) is None
    assert fallback.take_due() is None
    assert started(1).wait_after_launch(0, 2.0) == 2.0


def test_the_delay_of_an_attempt_already_started_is_not_armed() -> None:
    """Only the runner of the newest attempt arms the delay before the next one."""
    state = started()
    state.ended(0, FAILED, handled=True, aborted=False)
    assert state.take_due() == 1
    assert state.wait_after_launch(0, 0.5) is None  # attempt 1 already started
    assert state.wait_after_launch(1, 0.5) == 0.5


def test_no_launch_once_the_caller_aborted() -> None:
    """After the caller's abort nothing starts; the last handled outcome ends it when all ended."""
    state = started()
    assert not state.delay_passed(1, aborted=True)
    assert state.ended(0, FAILED, handled=True, aborted=True)
    assert state.final is FAILED


def test_a_fatal_end_finishes_without_an_outcome() -> None:
    """A `BaseException` (or a failing callback) finishes the execution; later ones change nothing."""
    state = started()
    state.delay_passed(1, aborted=False)
    state.take_due()
    assert state.ended_fatally(0)
    assert state.final is None
    assert not state.ended_fatally(1)
    assert state.settled


def test_an_abandoned_launch_no_longer_runs() -> None:
    """A launch withdrawn before it started counts as ended."""
    state = started()
    state.delay_passed(1, aborted=False)
    assert state.take_due() == 1
    assert state.ended(0, Ok(1), handled=False, aborted=False)
    assert not state.settled
    state.abandoned(1)
    assert state.settled


def test_the_last_abandoned_launch_of_an_aborted_execution_finishes_it() -> None:
    """The caller aborted after its attempt's handled end: the queued hedge never starts, the last outcome is the answer."""
    state = started()
    state.delay_passed(1, aborted=False)
    assert state.take_due() == 1  # launched: queued for a pool thread
    assert not state.ended(0, FAILED, handled=True, aborted=True)
    assert state.take_due() is None
    assert state.abandoned(1)
    assert state.settled
    assert state.final is FAILED


@pytest.mark.parametrize(
    ("generated", "expected"),
    [
        (None, 2.0),
        (0.5, 0.5),
        (dt.timedelta(milliseconds=20), 0.02),
        (-1, math.inf),
        (dt.timedelta(seconds=-1), math.inf),
        (math.inf, math.inf),
        (3, 3.0),
    ],
)
def test_generated_delays(generated: object, expected: float) -> None:
    """None keeps the default; negative is 0; a timedelta and infinity are accepted."""
    assert generated_delay(generated, 2.0) == expected


@pytest.mark.parametrize("generated", ["1", True, math.nan])
def test_nonsense_generated_delays_are_refused(generated: object) -> None:
    """The delay generator must return a duration or None."""
    with pytest.raises(ValidationError, match="delay_generator returned"):
        generated_delay(generated, 2.0)
