"""The lease engine's pure decisions: no loop, no thread, no clock."""

from __future__ import annotations

import copy
import random

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from resilience._lease._core import (
    ARM,
    BACKOFF_CAP,
    DISARM,
    FIRST_BACKOFF,
    LOSE,
    MIN_POLL,
    RELEASE,
    RENEW,
    RENEW_SLACK,
    REPORT,
    BackoffSchedule,
    LeaseMachine,
    SpinSchedule,
    safety_margin,
)


def test_safety_margin_is_two_ms_or_one_percent() -> None:
    """The margin is max(2 ms, 1% of ttl)."""
    assert safety_margin(0.1) == 0.002
    assert safety_margin(30.0) == 0.3
    assert safety_margin(0.002) == 0.001  # never more than half the ttl
    assert safety_margin(0.001) == 0.0005
    machine = LeaseMachine(30.0, None)
    machine.acquired(10.0, 10.5)
    assert machine.deadline == 10.0 + 30.0 - 0.3  # from the acquire's send time


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


def _held(ttl: float = 3.0, interval: float | None = 1.0, *, sent: float = 10.0, watch: bool = True) -> LeaseMachine:
    machine = LeaseMachine(ttl, interval, watch=watch)
    assert machine.acquired(sent, sent) == (ARM if watch or interval is not None else 0)
    return machine


def _renewed(machine: LeaseMachine, sent: float, now: float | None = None) -> int:
    """Tick at `sent` (a renewal is due) and answer True at `now`."""
    assert machine.tick(sent) & RENEW
    return machine.renew_answered(sent, sent if now is None else now, True)


def test_acquired_arms_the_first_renewal_and_the_deadline_follows_the_send_time() -> None:
    """The next renewal is due one interval after the last successful send; the deadline ttl - margin after it."""
    machine = _held()
    assert machine.armed_at == 11.0
    assert machine.deadline == 10.0 + 3.0 - 0.03
    assert _renewed(machine, 11.2, 11.3) == ARM
    assert machine.armed_at == 12.2
    assert machine.deadline == 11.2 + 3.0 - 0.03


def test_a_tick_before_anything_is_due_only_re_arms() -> None:
    """An event that fires early (an earlier one was armed) finds nothing to do and re-arms."""
    machine = _held()
    assert machine.tick(10.5) == ARM
    assert machine.armed_at == 11.0


def test_a_renewal_may_go_a_few_milliseconds_early_so_due_renewals_go_together() -> None:
    """Up to min(5 ms, interval/10) early; the deadline is never declared early."""
    machine = _held()
    assert machine.early_at == 11.0 - RENEW_SLACK
    assert machine.tick(11.0 - RENEW_SLACK) & RENEW
    assert machine.renew_ttl == 3.0


def test_the_deadline_stays_armed_while_a_renewal_is_in_flight() -> None:
    """A renewal that hangs: the tick at the deadline loses the lease, once."""
    machine = _held()
    assert machine.tick(11.0) == RENEW | ARM
    assert machine.armed_at == machine.deadline
    assert machine.tick(12.0) == ARM  # not due yet: nothing, and no second renewal
    assert machine.tick(machine.deadline) == LOSE
    assert machine.lost
    assert machine.renew_answered(11.0, 13.5, True) == 0  # the late answer is ignored
    assert machine.tick(20.0) == 0


def test_a_renewal_answered_false_or_after_the_deadline_is_a_loss() -> None:
    """The store says not ours, or says ours only after the local deadline: lost."""
    machine = _held()
    machine.tick(11.0)
    assert machine.renew_answered(11.0, 11.1, False) == LOSE | DISARM
    late = _held()
    late.tick(11.0)
    assert late.renew_answered(11.0, late.deadline, True) & LOSE


def test_a_renewal_timed_out_is_a_loss_unless_the_body_ended() -> None:
    """The runtime's bound on a renewal fired: lost; after the end, nothing."""
    machine = _held()
    machine.tick(11.0)
    assert machine.renew_timed_out() & LOSE
    ended = _held()
    ended.tick(11.0)
    ended.body_ended(11.5)
    assert ended.renew_timed_out() == 0


def test_without_renewal_only_the_deadline_is_armed() -> None:
    """No interval: no renewal is ever due; the deadline still holds."""
    machine = _held(interval=None, sent=0.0)
    assert machine.armed_at == machine.deadline == 3.0 - 0.03
    assert machine.extend_answered(1.0, 1.0, 3.0, True) == 0  # the earlier event fires, then re-arms
    assert machine.deadline == 1.0 + 3.0 - 0.03
    assert machine.tick(3.0 - 0.03) == ARM
    assert machine.armed_at == machine.deadline


def test_an_unwatched_lease_arms_nothing_and_is_never_lost_by_time() -> None:
    """A bare primitive handle: no renewal, no deadline watch, no loss at the end."""
    machine = _held(interval=None, watch=False)
    assert machine.armed_at == float("inf")
    assert machine.body_ended(100.0) == RELEASE


def test_extend_with_another_ttl_moves_the_deadline_both_ways() -> None:
    """An extend sets the deadline from its own ttl, even a shorter one."""
    machine = _held(30.0, None, sent=0.0)
    machine.extend_answered(1.0, 1.1, 1.0, True)
    assert machine.ttl == 1.0
    assert machine.deadline == 1.0 + 1.0 - 0.01
    machine.extend_answered(2.0, 2.1, 60.0, True)
    assert machine.deadline == 2.0 + 60.0 - 0.6


def test_a_late_reply_never_moves_the_deadline_past_a_newer_success() -> None:
    """A renewal sent before an extend was answered, answered after it: the earlier deadline wins."""
    machine = _held(30.0, 10.0, sent=0.0)
    assert machine.tick(10.0) & RENEW  # the renewal (ttl 30) is sent at 10.0 ...
    machine.extend_answered(10.5, 10.6, 1.0, True)  # ... extend(1.0) sent and answered meanwhile ...
    machine.renew_answered(10.0, 10.9, True)  # ... then the renewal's answer comes back
    assert machine.ttl == 1.0
    assert machine.deadline == 10.5 + 1.0 - 0.01
    assert machine.tick(11.0) & RENEW  # sent after both were answered: it acted last
    assert machine.renew_ttl == 1.0
    machine.renew_answered(11.0, 11.1, True)
    assert machine.deadline == 11.0 + 1.0 - 0.01


def test_an_extend_scales_the_heartbeat_with_the_ttl() -> None:
    """extend(ttl) shorter than the heartbeat: the renewals follow the new ttl."""
    machine = _held(1.0, 0.25, sent=0.0)
    machine.extend_answered(0.1, 0.1, 0.1, True)
    assert machine.armed_at == pytest.approx(0.1 + 0.025)
    machine.extend_answered(0.11, 0.11, 4.0, True)
    assert machine.renew_at == pytest.approx(0.11 + 0.25)


def test_extend_answered_false_is_a_loss_and_after_the_end_arms_nothing() -> None:
    """False: lost. After the body ended an extend still records the store's answer, arms nothing."""
    machine = _held()
    assert machine.extend_answered(10.5, 10.6, 3.0, False) & LOSE
    ended = _held()
    ended.holder_released()
    assert ended.extend_answered(10.5, 10.6, 3.0, True) == 0


def test_the_end_releases_once_and_checks_the_deadline_again() -> None:
    """body_ended: release; past the deadline also lost; a second end does nothing."""
    machine = _held()
    assert machine.body_ended(11.0) == RELEASE | DISARM
    assert machine.body_ended(11.0) == 0
    assert machine.holder_released() == 0
    late = _held()
    assert late.body_ended(late.deadline) == RELEASE | DISARM | LOSE
    assert late.release_answered(True) == 0  # already lost: told once


def test_a_release_answered_false_is_a_loss() -> None:
    """The final release found another owner: the lease had been lost."""
    machine = _held()
    machine.body_ended(11.0)
    assert machine.release_answered(False) == LOSE
    assert machine.release_answered(False) == 0


def test_a_renewal_in_flight_when_the_body_ends_is_ignored() -> None:
    """Renewal stops first: its answer changes nothing."""
    machine = _held()
    machine.tick(11.0)
    machine.body_ended(11.1)
    assert machine.renew_answered(11.0, 11.2, False) == 0
    assert machine.renew_failed(11.2) == 0
    assert not machine.lost


def test_failed_renewal_backs_off_up_to_a_tenth_of_ttl() -> None:
    """Retries after failures: 50 ms doubling, never more than ttl/10, never past the deadline."""
    machine = _held(30.0, 10.0, sent=0.0)
    now = 10.0
    delays = []
    while True:
        assert machine.tick(now) & RENEW
        assert machine.renew_failed(now) & REPORT
        if machine.renew_at is None:
            break
        delays.append(machine.renew_at - now)
        now = machine.renew_at
    assert delays[0] == pytest.approx(0.05)
    assert max(delays) <= 3.0
    assert now < machine.deadline
    assert machine.failures == len(delays) + 1
    assert machine.armed_at == machine.deadline  # no retry left: the deadline decides


def test_a_success_resets_the_failure_count() -> None:
    """After a successful renewal, the backoff starts again from 50 ms."""
    machine = _held(30.0, 10.0, sent=0.0)
    machine.tick(10.0)
    machine.renew_failed(10.0)
    machine.tick(10.05)
    machine.renew_failed(10.05)
    _renewed(machine, 10.2)
    assert machine.failures == 0
    machine.tick(20.2)
    machine.renew_failed(20.3)
    assert machine.renew_at == 20.3 + 0.05


@settings(deadline=None)  # pure code; a loaded machine must not make it flaky
@given(
    ttl=st.floats(min_value=0.001, max_value=1000.0),
    failures=st.integers(min_value=1, max_value=40),
)
def test_renewal_retries_stay_before_the_deadline(ttl: float, failures: int) -> None:
    """Whatever the failures, a retry is never scheduled at or after the deadline, nor later than ttl/10."""
    machine = _held(ttl, ttl / 3, sent=0.0)
    now = ttl / 3
    for _ in range(failures):
        assert machine.tick(now) & RENEW
        machine.renew_failed(now)
        retry = machine.renew_at
        if retry is None:
            break
        assert now < retry < machine.deadline
        assert retry - now <= ttl / 10 + 1e-12
        now = retry


@settings(deadline=None)  # pure code; a loaded machine must not make it flaky
@given(ttl=st.floats(min_value=0.001, max_value=1e6))
def test_every_accepted_ttl_can_be_held(ttl: float) -> None:
    """The margin is at most ttl/2: a lease answered at once is held until at least half its ttl."""
    assert 0 < safety_margin(ttl) <= ttl / 2
    machine = _held(ttl, ttl / 3, sent=0.0)
    assert machine.deadline >= ttl / 2
    assert machine.tick(0.0) == ARM  # neither lost nor renewed at the instant it was acquired


def _feed(machine: LeaseMachine, name: str, now: float, step: float) -> int:
    if name == "tick":
        return machine.tick(now)
    if name in {"ok", "no"}:
        return machine.renew_answered(now - step, now, name == "ok")
    if name == "error":
        return machine.renew_failed(now)
    if name == "timeout":
        return machine.renew_timed_out()
    if name == "extend":
        return machine.extend_answered(now, now, 1.0, True)
    if name == "end":
        return machine.body_ended(now)
    return machine.release_answered(False)


@settings(deadline=None)  # pure code; a loaded machine must not make it flaky
@example(events=[("tick", 0.5), ("ok", 0.375)])  # a renewal answered after the next one fell due
@given(
    events=st.lists(
        st.tuples(
            st.sampled_from(["tick", "ok", "no", "error", "timeout", "extend", "end", "release"]), st.floats(0, 2)
        ),
        max_size=30,
    )
)
def test_the_machine_is_lost_at_most_once_and_silent_after_the_end(events: list[tuple[str, float]]) -> None:
    """Any sequence of inputs: LOSE at most once; after the end nothing but the release's answer acts."""
    machine = _held(1.0, 1 / 3, sent=0.0)
    now = 0.0
    losses = 0
    for name, step in events:
        now += step
        flags = _feed(machine, name, now, step)
        losses += bool(flags & LOSE)
        if flags & ARM and machine.armed_at <= now:
            # Armed in the past: due at once (a renewal answered after the next one fell due,
            # or the deadline passed). The event then acts; it never just re-arms (a spin).
            assert copy.copy(machine).tick(now) & (RENEW | LOSE)
        if machine.ended and name in {"tick", "ok", "no", "error", "timeout"}:
            assert flags == 0
    assert losses <= 1
