"""The shared circuit's pure core: what it sends to the fleet and what the fleet's answers change."""

from __future__ import annotations

import pytest

from resilience import BrokenCircuitError, IsolatedCircuitError
from resilience.strategies import CircuitState
from resilience.strategies.circuit._fleet import Command, SharedCircuitCore, StateCode


def core(throughput: int = 4, brk: float = 5.0) -> SharedCircuitCore:
    return SharedCircuitCore(
        failure_ratio=0.5, minimum_throughput=throughput, sampling_duration=10.0, break_duration=brk
    )


def call(circuit: SharedCircuitCore, now: float, *, handled: bool) -> object:
    ticket, _ = circuit.admit(now)
    return circuit.record(now, ticket, handled=handled)


def opened(circuit: SharedCircuitCore, now: float = 0.0, remaining: float = 5.0, epoch: int = 1) -> None:
    transition = circuit.apply(now, StateCode.OPEN, epoch, remaining)
    assert transition is not None
    assert transition.state is CircuitState.OPEN


def test_closed_counts_without_opening_and_hands_the_batch_over_once() -> None:
    """Shared, failures only count: the fleet decides the opening; a batch is taken once."""
    circuit = core()
    for handled in (True, True, True, True, False):
        assert call(circuit, 0.0, handled=handled) is None
    assert circuit.state is CircuitState.CLOSED
    assert circuit.take_batch(0.0, 0.1) == (1, 4, Command.NONE, 0, 0.0)
    assert circuit.take_batch(0.0, 0.1) == (0, 0, Command.NONE, 0, 0.0)
    assert circuit.window.health(0.0) == (5, 4)  # kept for the day the store is unreachable


def test_an_opening_learned_from_the_fleet_rejects_with_its_time_left() -> None:
    """The fleet's opening is one transition here, with the fleet's break; calls get `retry_after`."""
    circuit = core()
    transition = circuit.apply(1.0, StateCode.OPEN, 3, 2.5)
    assert transition is not None
    assert (transition.state, transition.break_duration, transition.is_manual) == (CircuitState.OPEN, 2.5, False)
    with pytest.raises(BrokenCircuitError) as caught:
        circuit.admit(2.0)
    assert caught.value.retry_after == pytest.approx(1.5)
    assert not circuit.probe_wanted
    assert circuit.take_batch(2.0, 0.1)[2] is Command.NONE  # the break is not nearly over
    assert circuit.apply(2.0, StateCode.OPEN, 3, 1.0) is None  # same epoch: only the time left moves
    with pytest.raises(BrokenCircuitError) as caught:
        circuit.admit(2.5)
    assert caught.value.retry_after == pytest.approx(0.5)
    assert circuit.apply(2.5, StateCode.OPEN, 5, 4.0) is None  # re-opened elsewhere: still open here
    with pytest.raises(BrokenCircuitError) as caught:
        circuit.admit(2.5)
    assert caught.value.retry_after == pytest.approx(4.0)


def test_after_the_break_a_rejection_asks_the_fleet_for_the_probe() -> None:
    """No local probe: the call is rejected and the next batch claims the probe."""
    circuit = core()
    opened(circuit, remaining=1.0)
    with pytest.raises(BrokenCircuitError) as caught:
        circuit.admit(1.0)
    assert caught.value.retry_after is None
    assert circuit.probe_wanted
    assert circuit.take_batch(0.0, 0.1)[2:] == (Command.CLAIM_PROBE, 1, 0.0)
    assert not circuit.probe_wanted


def test_the_granted_probe_is_one_call_and_its_success_closes_for_the_fleet() -> None:
    """Granted: the next call half-opens and probes, others wait; success closes and is sent."""
    circuit = core()
    opened(circuit, remaining=0.0)
    assert circuit.apply(1.0, StateCode.HALF_OPEN, 2, 5.0, granted=True) is None
    ticket, transition = circuit.admit(1.1)
    assert transition is not None
    assert transition.state is CircuitState.HALF_OPEN
    with pytest.raises(BrokenCircuitError):
        circuit.admit(1.2)
    closed = circuit.record(1.3, ticket, handled=False)
    assert closed is not None
    assert closed.state is CircuitState.CLOSED
    assert circuit.take_batch(0.0, 0.1)[2:] == (Command.PROBE_SUCCEEDED, 2, 0.0)
    assert circuit.apply(1.4, StateCode.CLOSED, 3, 0.0) is None  # the fleet agrees: nothing new here


def test_a_failed_probe_reopens_with_the_fleets_break_and_no_generator() -> None:
    """A handled failure of our probe re-opens here at once (break known) and tells the fleet."""
    circuit = core(brk=4.0)
    opened(circuit, remaining=0.0)
    circuit.apply(0.0, StateCode.HALF_OPEN, 2, 5.0, granted=True)
    ticket, _ = circuit.admit(0.0)
    transition = circuit.record(0.5, ticket, handled=True)
    assert transition is not None
    assert (transition.state, transition.break_duration) == (CircuitState.OPEN, 4.0)
    assert circuit.take_batch(0.0, 0.1)[2] is Command.PROBE_FAILED
    with pytest.raises(BrokenCircuitError) as caught:
        circuit.admit(1.0)
    assert caught.value.retry_after == pytest.approx(3.5)


def test_a_grant_unused_before_its_lease_ends_is_not_a_probe() -> None:
    """A grant whose lease ran out may have gone to another process: ask again instead."""
    circuit = core()
    opened(circuit, remaining=0.0)
    circuit.apply(0.0, StateCode.HALF_OPEN, 2, 1.0, granted=True)
    with pytest.raises(BrokenCircuitError):
        circuit.admit(1.0)
    assert circuit.probe_wanted


def test_a_probe_ended_by_a_base_exception_frees_the_slot_within_the_grant() -> None:
    """Cancellation frees our probe slot: the next call here probes (the grant is still ours)."""
    circuit = core()
    opened(circuit, remaining=0.0)
    circuit.apply(0.0, StateCode.HALF_OPEN, 2, 5.0, granted=True)
    ticket, _ = circuit.admit(0.0)
    circuit.release(ticket)
    assert circuit.admit(1.0) == (ticket, None)
    with pytest.raises(BrokenCircuitError):
        circuit.admit(1.5)
    with pytest.raises(BrokenCircuitError):
        circuit.admit(5.5)  # the lease ended: the slot is not ours any more
    assert circuit.probe_wanted


def test_someone_elses_probe_half_opens_here_and_rejects_until_its_lease_ends() -> None:
    """Another process probes: HALF_OPEN here (one event), calls rejected, then a new claim."""
    circuit = core()
    opened(circuit)
    transition = circuit.apply(0.0, StateCode.HALF_OPEN, 2, 2.0)
    assert transition is not None
    assert transition.state is CircuitState.HALF_OPEN
    assert circuit.apply(0.5, StateCode.HALF_OPEN, 2, 1.5) is None
    with pytest.raises(BrokenCircuitError) as caught:
        circuit.admit(1.0)
    assert caught.value.retry_after == pytest.approx(1.0)
    assert circuit.probe_wanted  # asked for, so that a holder without traffic cannot keep it
    assert circuit.take_batch(1.0, 0.1)[2] is Command.CLAIM_PROBE
    with pytest.raises(BrokenCircuitError):
        circuit.admit(2.0)
    assert circuit.probe_wanted
    assert circuit.apply(2.1, StateCode.HALF_OPEN, 3, 1.0) is None  # still half-open: a new lease, not ours
    assert circuit.apply(2.2, StateCode.HALF_OPEN, 4, 5.0, granted=True) is None
    _, transition = circuit.admit(2.3)
    assert transition is None  # already half-open: the slot is ours now
    with pytest.raises(BrokenCircuitError):
        circuit.admit(2.4)


def test_a_grant_while_closed_here_opens_first() -> None:
    """An answer granting the probe to a circuit that thinks it is closed shows the opening."""
    circuit = core()
    transition = circuit.apply(0.0, StateCode.HALF_OPEN, 2, 5.0, granted=True)
    assert transition is not None
    assert (transition.state, transition.break_duration) == (CircuitState.OPEN, 0.0)
    _, half = circuit.admit(0.1)
    assert half is not None
    assert half.state is CircuitState.HALF_OPEN


def test_isolation_and_closing_from_the_fleet_are_manual_transitions() -> None:
    """ISOLATED and a hand-made CLOSED arrive with `is_manual`; isolation rejects as isolated."""
    circuit = core()
    isolated = circuit.apply(0.0, StateCode.ISOLATED, 1, 0.0, manual=True)
    assert isolated is not None
    assert (isolated.state, isolated.is_manual) == (CircuitState.ISOLATED, True)
    with pytest.raises(IsolatedCircuitError):
        circuit.admit(0.0)
    assert circuit.apply(0.0, StateCode.ISOLATED, 2, 0.0, manual=True) is None
    closed = circuit.apply(0.0, StateCode.CLOSED, 3, 0.0, manual=True)
    assert closed is not None
    assert (closed.state, closed.is_manual) == (CircuitState.CLOSED, True)


def test_a_fleet_cycle_missed_while_closed_restarts_the_window() -> None:
    """Closed here, closed there at a later epoch: the fleet opened and closed meanwhile."""
    circuit = core()
    call(circuit, 0.0, handled=True)
    assert circuit.apply(0.0, StateCode.CLOSED, 2, 0.0) is None
    assert circuit.window.health(0.0) == (0, 0)
    assert circuit.take_batch(0.0, 0.1)[:2] == (0, 0)  # counted under the epoch that is over


def test_manual_moves_are_sent_and_only_the_last_one_counts() -> None:
    """isolate() then close(): one CLOSE goes out; answers wait until it has."""
    circuit = core()
    assert circuit.isolate(0.0) is not None
    assert circuit.close() is not None
    assert circuit.outbox == [(Command.CLOSE, 0, 0.0)]
    assert circuit.apply(0.0, StateCode.OPEN, 5, 1.0) is None  # our command is on its way
    assert circuit.state is CircuitState.CLOSED
    assert circuit.take_batch(0.0, 0.1)[2] is Command.CLOSE
    assert circuit.take_batch(0.0, 0.1)[2] is Command.NONE


def test_stale_outcomes_do_not_count() -> None:
    """An outcome admitted under an older state is ignored, as in a local circuit."""
    circuit = core()
    ticket, _ = circuit.admit(0.0)
    opened(circuit)
    assert circuit.record(0.0, ticket, handled=True) is None
    assert circuit.take_batch(0.0, 0.1)[:2] == (0, 0)


def test_unreachable_store_makes_it_a_local_circuit_that_tells_the_fleet_later() -> None:
    """Local state decides (opening on the local ratio); the opening is queued for the fleet."""
    circuit = core(throughput=2)
    circuit.go_local(0.0)
    circuit.go_local(0.0)  # idempotent
    assert circuit.apply(0.0, StateCode.OPEN, 9, 1.0) is None  # no answers while local
    call(circuit, 0.0, handled=True)
    transition = call(circuit, 0.0, handled=True)
    assert transition is not None
    assert transition.state is CircuitState.OPEN
    assert circuit.outbox == [(Command.OPEN, 0, 5.0)]
    assert circuit.known(1.0) == (StateCode.OPEN, 4.0)
    ticket, half = circuit.admit(5.0)  # a local probe, as in a local circuit
    assert half is not None
    assert circuit.record(5.0, ticket, handled=False) is not None
    assert circuit.take_batch(0.0, 0.1)[2] is Command.OPEN  # no probe command while local


def test_going_local_with_a_grant_probes_locally() -> None:
    """A grant held when the store goes away becomes a local probe at once."""
    circuit = core()
    opened(circuit, remaining=0.0)
    circuit.apply(0.0, StateCode.HALF_OPEN, 2, 5.0, granted=True)
    circuit.go_local(1.0)
    _, transition = circuit.admit(1.0)
    assert transition is not None
    assert transition.state is CircuitState.HALF_OPEN


def test_back_from_local_the_fleets_answer_wins_even_at_the_same_epoch() -> None:
    """Decisions made alone are replaced by the fleet's state at the first answer."""
    circuit = core(throughput=2)
    circuit.go_local(0.0)
    circuit.go_shared()
    circuit.go_shared()  # idempotent
    closed_here = circuit.apply(0.0, StateCode.OPEN, 0, 3.0)
    assert closed_here is not None
    assert closed_here.state is CircuitState.OPEN
    assert circuit.apply(0.0, StateCode.OPEN, 0, 3.0) is None


def test_known_state_for_a_store_that_lost_its_data() -> None:
    """`known()` is what a restore writes back: the state and the break left."""
    circuit = core()
    assert circuit.known(0.0) == (StateCode.CLOSED, 0.0)
    opened(circuit, now=0.0, remaining=2.0)
    assert circuit.known(1.5) == (StateCode.OPEN, 0.5)
    assert circuit.known(3.0) == (StateCode.OPEN, 0.0)
    circuit.apply(3.0, StateCode.HALF_OPEN, 2, 1.0)
    assert circuit.known(3.0) == (StateCode.HALF_OPEN, 0.0)


def test_the_probe_is_claimed_before_the_break_ends_without_a_call() -> None:
    """Sparse traffic: the sync claims the probe one interval before the break ends, unasked."""
    circuit = core()
    opened(circuit, remaining=1.0)
    assert circuit.take_batch(0.5, 0.1)[2] is Command.NONE
    assert circuit.take_batch(0.95, 0.1)[2:] == (Command.CLAIM_PROBE, 1, 0.0)
    assert circuit.apply(0.96, StateCode.HALF_OPEN, 2, 5.04, granted=True, wait=0.04) is None
    assert circuit.known(0.97) == (StateCode.HALF_OPEN, 0.0)  # the fleet's probe is ours
    with pytest.raises(BrokenCircuitError) as caught:
        circuit.admit(0.98)  # still within the break
    assert caught.value.retry_after == pytest.approx(0.02)
    assert circuit.take_batch(0.99, 0.1)[2:] == (Command.RENEW_PROBE, 2, 0.0)  # unused: keep it
    assert circuit.apply(0.99, StateCode.HALF_OPEN, 2, 5.0, granted=True) is None
    _, transition = circuit.admit(5.9)  # the first call after the break, however late
    assert transition is not None
    assert transition.state is CircuitState.HALF_OPEN
    assert circuit.take_batch(5.9, 0.1)[2] is Command.NONE  # a running probe is not renewed


def test_a_refused_renewal_gives_the_probe_up() -> None:
    """Another process asked for the probe: the renewal is refused and the grant is no longer ours."""
    circuit = core()
    opened(circuit, remaining=0.0)
    circuit.apply(0.0, StateCode.HALF_OPEN, 2, 1.0, granted=True)
    assert circuit.take_batch(0.1, 0.1)[2] is Command.RENEW_PROBE
    assert circuit.apply(0.1, StateCode.HALF_OPEN, 2, 0.9, granted=False) is not None  # half-open, not ours
    assert circuit.state is CircuitState.HALF_OPEN
    with pytest.raises(BrokenCircuitError):
        circuit.admit(0.2)


def test_an_answer_at_the_same_epoch_in_another_state_wins() -> None:
    """Our probe's success was refused (the store lost the probe): the fleet's OPEN is adopted."""
    circuit = core()
    opened(circuit, remaining=0.0)
    circuit.apply(0.0, StateCode.HALF_OPEN, 2, 5.0, granted=True)
    ticket, _ = circuit.admit(0.0)
    assert circuit.record(0.1, ticket, handled=False) is not None  # closed here
    assert circuit.take_batch(0.2, 0.1)[2] is Command.PROBE_SUCCEEDED
    transition = circuit.apply(0.2, StateCode.OPEN, 2, 0.0)  # refused: the store has it open
    assert transition is not None
    assert transition.state is CircuitState.OPEN
    assert circuit.take_batch(0.3, 0.1)[2] is Command.CLAIM_PROBE  # and asks for a probe at once


def test_going_local_opens_at_once_on_what_was_counted_while_shared() -> None:
    """Failures counted before the store was found unreachable are not forgotten."""
    circuit = core(throughput=4)
    for _ in range(4):
        call(circuit, 0.0, handled=True)
    assert circuit.state is CircuitState.CLOSED  # shared: the fleet decides
    transition = circuit.go_local(0.1)
    assert transition is not None
    assert (transition.state, transition.break_duration) == (CircuitState.OPEN, 5.0)
    assert circuit.outbox == [(Command.OPEN, 0, 5.0)]
    assert core().go_local(0.0) is None  # nothing counted: stays closed
