"""The circuit state machine as pure code: every step takes `now`; no lock, loop or clock."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from resilience import BrokenCircuitError, IsolatedCircuitError
from resilience.strategies import CircuitState
from resilience.strategies.circuit._core import CircuitCore, RollingWindow


def core(ratio: float = 0.5, throughput: int = 4, sampling: float = 10.0, brk: float = 5.0) -> CircuitCore:
    return CircuitCore(
        failure_ratio=ratio, minimum_throughput=throughput, sampling_duration=sampling, break_duration=brk
    )


def call(circuit: CircuitCore, now: float, *, handled: bool) -> object:
    ticket, _ = circuit.admit(now)
    return circuit.record(now, ticket, handled=handled)


def test_opens_at_ratio_once_minimum_throughput_is_reached() -> None:
    """It opens on the call that brings throughput to the minimum with the ratio reached."""
    circuit = core()
    for handled in (False, True, True):
        assert call(circuit, 0.0, handled=handled) is None
    transition = call(circuit, 0.0, handled=False)
    assert transition is None  # 2 of 4 = 0.5 but the last call succeeded: no check on success
    transition = call(circuit, 0.0, handled=True)
    assert transition is not None
    assert transition.state is CircuitState.OPEN
    assert (transition.failure_count, transition.failure_rate) == (3, 0.6)


def test_the_ticket_is_the_generation_while_closed_and_none_otherwise() -> None:
    """What the strategy reads once to admit a closed call and once to check its success."""
    circuit = core(throughput=2)
    assert circuit.ticket == circuit.generation == 0
    call(circuit, 0.0, handled=True)
    call(circuit, 0.0, handled=True)  # opens
    assert (circuit.state, circuit.ticket) == (CircuitState.OPEN, None)
    ticket, _ = circuit.admit(5.0)  # the probe
    assert (circuit.state, circuit.ticket) == (CircuitState.HALF_OPEN, None)
    circuit.record(5.0, ticket, handled=False)  # closes
    assert circuit.state is CircuitState.CLOSED
    assert circuit.ticket == circuit.generation == 3
    circuit.isolate(6.0)
    assert circuit.ticket is None
    circuit.close()
    assert circuit.ticket == circuit.generation == 5


def test_below_minimum_throughput_never_opens() -> None:
    """Failures alone do not open the circuit until `minimum_throughput` calls were seen."""
    circuit = core(throughput=5)
    for _ in range(4):
        assert call(circuit, 0.0, handled=True) is None
    assert circuit.state is CircuitState.CLOSED
    assert call(circuit, 0.0, handled=True) is not None


@pytest.mark.parametrize(
    ("ratio", "failures", "opens"), [(0.3, 3, True), (0.3, 2, False), (1.0, 10, True), (1.0, 9, False)]
)
def test_ratio_boundary_is_inclusive(ratio: float, failures: int, opens: bool) -> None:
    """A failure ratio exactly at `failure_ratio` opens (no float rounding surprise)."""
    circuit = core(ratio=ratio, throughput=10)
    for _ in range(10 - failures):
        call(circuit, 0.0, handled=False)
    for _ in range(failures):
        call(circuit, 0.0, handled=True)
    assert (circuit.state is CircuitState.OPEN) is opens


def test_window_rolls_old_failures_out() -> None:
    """Outcomes older than `sampling_duration` no longer count."""
    circuit = core(throughput=2, sampling=10.0)
    call(circuit, 0.0, handled=True)
    assert call(circuit, 10.0, handled=True) is None  # the first failure expired
    assert circuit.window.health(10.0) == (1, 1)
    assert call(circuit, 19.0, handled=True) is not None


def test_window_buckets_expire_by_start_time() -> None:
    """The window keeps ten buckets; each expires a whole `sampling_duration` after it started."""
    window = RollingWindow(10.0, failure_ratio=0.5, minimum_throughput=2)
    window.failure(0.0)
    window.success(0.5)  # same bucket as 0.0
    window.success(1.0)  # a new bucket
    assert window.health(9.99) == (3, 1)
    assert window.health(10.0) == (1, 0)
    assert window.health(11.0) == (0, 0)
    window.reset()
    assert window.health(11.0) == (0, 0)


def test_open_rejects_with_time_left_then_half_opens_at_the_exact_time() -> None:
    """Open until `break_duration` has passed; the first call at that instant is the probe."""
    circuit = core(throughput=2)
    call(circuit, 0.0, handled=True)
    call(circuit, 1.0, handled=True)
    with pytest.raises(BrokenCircuitError) as caught:
        circuit.admit(4.0)
    assert caught.value.retry_after == 2.0
    ticket, transition = circuit.admit(6.0)
    assert transition is not None
    assert transition.state is CircuitState.HALF_OPEN
    assert ticket == circuit.generation


def test_half_open_admits_one_probe_until_it_ends() -> None:
    """A second call while the probe runs is rejected; a successful probe closes and resets."""
    circuit = core(throughput=2)
    call(circuit, 0.0, handled=True)
    call(circuit, 0.0, handled=True)
    ticket, _ = circuit.admit(5.0)
    with pytest.raises(BrokenCircuitError, match="probe"):
        circuit.admit(5.0)
    transition = circuit.record(6.0, ticket, handled=False)
    assert transition is not None
    assert transition.state is CircuitState.CLOSED
    assert circuit.window.health(6.0) == (0, 0)


def test_failed_probe_reopens_for_a_new_break() -> None:
    """A handled failure of the probe opens the circuit again, from the probe's end."""
    circuit = core(throughput=2)
    call(circuit, 0.0, handled=True)
    call(circuit, 0.0, handled=True)
    ticket, _ = circuit.admit(5.0)
    transition = circuit.record(7.0, ticket, handled=True)
    assert transition is not None
    assert transition.state is CircuitState.OPEN
    with pytest.raises(BrokenCircuitError) as caught:
        circuit.admit(11.0)
    assert caught.value.retry_after == 1.0


def test_release_frees_the_probe_slot() -> None:
    """A probe that ended with a BaseException frees the slot: the next call probes."""
    circuit = core(throughput=2)
    call(circuit, 0.0, handled=True)
    call(circuit, 0.0, handled=True)
    ticket, _ = circuit.admit(5.0)
    circuit.release(ticket)
    assert circuit.state is CircuitState.HALF_OPEN
    again, transition = circuit.admit(5.0)
    assert again == ticket
    assert transition is None


def test_hung_probe_loses_its_slot_after_a_break_duration() -> None:
    """As in Polly, a probe still running after another break no longer blocks a new probe."""
    circuit = core(throughput=2)
    call(circuit, 0.0, handled=True)
    call(circuit, 0.0, handled=True)
    circuit.admit(5.0)
    with pytest.raises(BrokenCircuitError):
        circuit.admit(9.9)
    circuit.admit(10.0)


def test_stale_outcomes_do_not_count() -> None:
    """An outcome counts only if the circuit has not changed state since its call started."""
    circuit = core(throughput=2)
    old_ticket, _ = circuit.admit(0.0)
    call(circuit, 0.0, handled=True)
    call(circuit, 0.0, handled=True)  # opens
    probe, _ = circuit.admit(5.0)
    circuit.record(5.0, probe, handled=False)  # closes
    assert circuit.record(5.0, old_ticket, handled=True) is None
    assert circuit.window.health(5.0) == (0, 0)
    circuit.release(old_ticket)  # a stale release changes nothing either
    assert circuit.state is CircuitState.CLOSED


def test_pending_break_rejects_until_set() -> None:
    """While a break duration generator runs, the open circuit rejects with no retry_after."""
    circuit = core(throughput=2)
    call(circuit, 0.0, handled=True)
    ticket, _ = circuit.admit(0.0)
    transition = circuit.record(0.0, ticket, handled=True, pending_break=True)
    assert transition is not None
    with pytest.raises(BrokenCircuitError) as caught:
        circuit.admit(100.0)
    assert caught.value.retry_after is None
    assert circuit.set_break(transition.generation, 30.0) == 30.0
    with pytest.raises(BrokenCircuitError):
        circuit.admit(29.0)
    circuit.admit(30.0)


def test_set_break_ignores_stale_openings_and_bad_values() -> None:
    """A late generator result for an older opening changes nothing; infinity uses the default."""
    circuit = core(throughput=2)
    call(circuit, 0.0, handled=True)
    transition = call(circuit, 0.0, handled=True)
    assert transition is not None
    assert circuit.set_break(transition.generation, float("inf")) == 5.0
    assert circuit.set_break(transition.generation - 1, 1.0) == 1.0
    with pytest.raises(BrokenCircuitError):
        circuit.admit(4.0)


def test_isolate_and_close_by_hand() -> None:
    """Isolation holds it open whatever the time; closing ends it; repeats are no-ops."""
    circuit = core()
    transition = circuit.isolate(0.0)
    assert transition is not None
    assert transition.is_manual
    assert transition.state is CircuitState.ISOLATED
    assert circuit.isolate(1.0) is None
    with pytest.raises(IsolatedCircuitError):
        circuit.admit(1e9)
    closed = circuit.close()
    assert closed is not None
    assert closed.is_manual
    assert circuit.close() is None
    assert circuit.admit(0.0)[1] is None


operations = st.lists(
    st.tuples(st.sampled_from(["ok", "fail", "base", "isolate", "close"]), st.floats(min_value=0, max_value=3)),
    max_size=60,
)


@given(operations)
def test_never_closes_without_a_successful_probe(ops: list[tuple[str, float]]) -> None:
    """Invariant: an automatic close only ever follows a probe that did not fail."""
    circuit = core(throughput=2, sampling=5.0, brk=2.0)
    now = 0.0
    for op, step in ops:
        now += step
        if op == "isolate":
            circuit.isolate(now)
            continue
        if op == "close":
            circuit.close()
            continue
        before = circuit.state
        try:
            ticket, _ = circuit.admit(now)
        except BrokenCircuitError:
            assert circuit.state in (CircuitState.OPEN, CircuitState.HALF_OPEN, CircuitState.ISOLATED)
            continue
        if op == "base":
            circuit.release(ticket)
            continue
        admitted_state = circuit.state
        transition = circuit.record(now, ticket, handled=op == "fail")
        if transition is not None and transition.state is CircuitState.CLOSED:
            assert admitted_state is CircuitState.HALF_OPEN
            assert op == "ok"
            assert not transition.is_manual
        assert before is not CircuitState.ISOLATED


def test_transition_repr_names_the_state() -> None:
    """A transition's repr shows the state, generation and whether it was manual."""
    circuit = core()
    transition = circuit.isolate(0.0)
    assert repr(transition) == "Transition(ISOLATED, generation=1, manual=True)"
