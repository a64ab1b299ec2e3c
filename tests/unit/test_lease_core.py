"""The lease engine's pure decisions: no loop, no thread, no clock."""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from resilience._lease._core import (
    BACKOFF_CAP,
    FIRST_BACKOFF,
    MIN_POLL,
    BackoffSchedule,
    LeaseTimeline,
    SpinSchedule,
    lease_deadline,
    safety_margin,
)


def test_safety_margin_is_two_ms_or_one_percent() -> None:
    """The margin is max(2 ms, 1% of ttl)."""
    assert safety_margin(0.1) == 0.002
    assert safety_margin(30.0) == 0.3
    assert safety_margin(0.002) == 0.001  # never more than half the ttl
    assert safety_margin(0.001) == 0.0005
    assert lease_deadline(10.0, 30.0) == 10.0 + 30.0 - 0.3


def test_zero_wait_gives_one_attempt() -> None:
    """wait=0: the first refusal gives up."""
    schedule = BackoffSchedule(5.0, 0.0, random.Random(1))
    assert schedule.next_wait(5.0, None) is None


def test_first_wait_is_at_most_50ms_and_grows_to_the_cap() -> None:
    """Waits start at <= 50 ms, double, and never exceed 1 s."""
    schedule = BackoffSchedule(0.0, 1000.0, random.Random(1))
    waits = [schedule.next_wait(0.0, None) for _ in range(12)]
    assert all(w is not None for w in waits)
    assert waits[0] is not None
    assert FIRST_BACKOFF / 2 <= waits[0] <= FIRST_BACKOFF
    assert max(w for w in waits if w is not None) <= BACKOFF_CAP
    assert waits[-1] is not None
    assert waits[-1] >= BACKOFF_CAP / 2


def test_wait_is_capped_by_the_holders_time_left() -> None:
    """A holder that has 3 ms left is polled after 3 ms, not after the backoff."""
    schedule = BackoffSchedule(0.0, 10.0, random.Random(1))
    for _ in range(5):
        schedule.next_wait(0.0, None)
    assert schedule.next_wait(0.0, 0.003) == 0.003
    assert schedule.next_wait(0.0, 0.0) == MIN_POLL


def test_last_attempt_is_at_the_deadline() -> None:
    """The wait is capped by the budget left, then the schedule gives up."""
    schedule = BackoffSchedule(0.0, 0.1, random.Random(1))
    now = 0.0
    while (wait := schedule.next_wait(now, None)) is not None:
        now += wait
    assert now == 0.1


@given(
    wait=st.floats(min_value=0.0, max_value=100.0),
    seed=st.integers(0, 2**32),
    held=st.lists(st.one_of(st.none(), st.floats(min_value=0.0, max_value=5.0)), min_size=1, max_size=40),
)
def test_backoff_bounds(wait: float, seed: int, held: list[float | None]) -> None:
    """Every wait is positive, <= 1 s, <= the budget left, and the sum never passes the budget."""
    schedule = BackoffSchedule(0.0, wait, random.Random(seed))
    now = 0.0
    for held_for in held:
        delay = schedule.next_wait(now, held_for)
        if delay is None:
            assert now >= wait
            return
        assert 0 < delay <= BACKOFF_CAP
        assert delay <= wait - now + 1e-12
        if held_for is not None:
            assert delay <= max(held_for, MIN_POLL)
        now += delay
    assert now <= wait + 1e-9


def test_spin_schedule_retries_n_times() -> None:
    """The primitives' spin: exactly `retries` waits of `delay`."""
    schedule = SpinSchedule(2, 0.1)
    assert [schedule.next_wait(0.0, 5.0) for _ in range(3)] == [0.1, 0.1, None]


def test_timeline_renews_every_interval_from_the_send_time() -> None:
    """The next renewal is due one interval after the last successful send."""
    timeline = LeaseTimeline(3.0, 1.0, sent_at=10.0)
    assert timeline.first_renewal(10.0) == 11.0
    assert timeline.deadline == 10.0 + 3.0 - 0.03
    assert timeline.renewed(11.2, 11.3, 3.0) == 12.2
    assert timeline.deadline == 11.2 + 3.0 - 0.03
    assert not timeline.expired(14.0)
    assert timeline.expired(14.17)


def test_timeline_without_renewal() -> None:
    """No interval: no renewal is ever due; the deadline still holds."""
    timeline = LeaseTimeline(3.0, None, sent_at=0.0)
    assert timeline.first_renewal(0.0) is None
    assert timeline.renewed(1.0, 1.0, 3.0) is None
    assert timeline.deadline == 1.0 + 3.0 - 0.03


def test_extend_with_another_ttl_moves_the_deadline_both_ways() -> None:
    """An extend sets the deadline from its own ttl, even a shorter one."""
    timeline = LeaseTimeline(30.0, None, sent_at=0.0)
    timeline.renewed(1.0, 1.1, 1.0, extend=True)
    assert timeline.ttl == 1.0
    assert timeline.deadline == 1.0 + 1.0 - 0.01
    timeline.renewed(2.0, 2.1, 60.0, extend=True)
    assert timeline.deadline == 2.0 + 60.0 - 0.6


def test_a_late_reply_never_moves_the_deadline_past_a_newer_success() -> None:
    """A renewal sent before an extend was answered, answered after it: the earlier deadline wins."""
    timeline = LeaseTimeline(30.0, 10.0, sent_at=0.0)
    timeline.renewed(10.5, 10.6, 1.0, extend=True)  # extend(1.0) sent and answered ...
    timeline.renewed(10.0, 10.9, 30.0)  # ... while the renewal sent at 10.0 was in flight
    assert timeline.ttl == 1.0
    assert timeline.deadline == 10.5 + 1.0 - 0.01
    timeline.renewed(11.0, 11.1, 1.0)  # sent after both were answered: it acted last
    assert timeline.deadline == 11.0 + 1.0 - 0.01


def test_an_extend_scales_the_heartbeat_with_the_ttl() -> None:
    """extend(ttl) shorter than the heartbeat: the renewals follow the new ttl."""
    timeline = LeaseTimeline(1.0, 0.25, sent_at=0.0)
    assert timeline.renewed(0.1, 0.1, 0.1, extend=True) == pytest.approx(0.1 + 0.025)
    assert timeline.renewed(0.2, 0.2, 4.0, extend=True) == pytest.approx(0.2 + 0.25)


def test_failed_renewal_backs_off_up_to_a_tenth_of_ttl() -> None:
    """Retries after failures: 50 ms doubling, never more than ttl/10, never past the deadline."""
    timeline = LeaseTimeline(30.0, 10.0, sent_at=0.0)
    now = 10.0
    delays = []
    while (retry := timeline.failed(now)) is not None:
        delays.append(retry - now)
        now = retry
    assert delays[0] == pytest.approx(0.05)
    assert max(delays) <= 3.0
    assert now < timeline.deadline
    assert timeline.failures == len(delays) + 1


def test_a_success_resets_the_failure_count() -> None:
    """After a successful renewal, the backoff starts again from 50 ms."""
    timeline = LeaseTimeline(30.0, 10.0, sent_at=0.0)
    timeline.failed(10.0)
    timeline.failed(10.05)
    timeline.renewed(10.2, 10.2, 30.0)
    assert timeline.failures == 0
    assert timeline.failed(10.3) == 10.3 + 0.05


@given(
    ttl=st.floats(min_value=0.001, max_value=1000.0),
    failures=st.integers(min_value=1, max_value=40),
)
def test_renewal_retries_stay_before_the_deadline(ttl: float, failures: int) -> None:
    """Whatever the failures, a retry is never scheduled at or after the deadline, nor later than ttl/10."""
    timeline = LeaseTimeline(ttl, ttl / 3, sent_at=0.0)
    now = ttl / 3
    for _ in range(failures):
        retry = timeline.failed(now)
        if retry is None:
            break
        assert now < retry < timeline.deadline
        assert retry - now <= ttl / 10 + 1e-12
        now = retry
