"""RedisCircuitStateStore: the fleet's decisions inside one script, standalone and on a Cluster."""

from __future__ import annotations

import time
import uuid
from typing import TYPE_CHECKING, Any

import pytest

from resilience import ValidationError
from resilience.stores import RedisCircuitStateStore
from resilience.stores._redis_circuit import CircuitExchange, CircuitReply
from resilience.strategies.circuit._fleet import Command, StateCode

if TYPE_CHECKING:
    from tests.redis.conftest import Deployment

pytestmark = pytest.mark.redis


def batch(
    successes: int = 0,
    failures: int = 0,
    *,
    command: Command = Command.NONE,
    about: int = 0,
    epoch: int = 0,
    state: StateCode = StateCode.CLOSED,
    remaining: float = 0.0,
    ratio: float = 0.5,
    throughput: int = 10,
    sampling: float = 30.0,
    brk: float = 5.0,
    interval: float = 0.01,
) -> CircuitExchange:
    return CircuitExchange(
        successes, failures, ratio, throughput, sampling, brk, command, about, epoch, state, remaining, interval
    )


@pytest.fixture
def store(sync_redis: Any) -> RedisCircuitStateStore:
    return RedisCircuitStateStore(sync_redis, prefix=f"circuit-{uuid.uuid4().hex[:8]}")


def test_the_ratio_is_over_every_callers_outcomes(store: RedisCircuitStateStore, key: str) -> None:
    """Six successes from one process and four failures from another open at 0.4."""
    assert store.exchange(key, batch(6, ratio=0.4)) == CircuitReply(0, 0, 0.0, False, False)
    reply = store.exchange(key, batch(0, 3, ratio=0.4))
    assert reply.state == StateCode.CLOSED  # 9 calls: below the minimum throughput
    reply = store.exchange(key, batch(0, 1, ratio=0.4))
    assert (reply.state, reply.epoch) == (StateCode.OPEN, 1)
    assert 4.9 < reply.remaining <= 5.0


def test_successes_alone_never_open_and_failures_below_the_ratio_neither(
    store: RedisCircuitStateStore, key: str
) -> None:
    """The ratio is checked when failures arrive, like Polly; below it stays closed."""
    store.exchange(key, batch(0, 4))
    assert store.exchange(key, batch(20)).state == StateCode.CLOSED
    assert store.exchange(key, batch(0, 1)).state == StateCode.CLOSED  # 5 of 25


def test_counts_from_an_epoch_that_is_over_do_not_count(store: RedisCircuitStateStore, key: str) -> None:
    """A batch counted before the fleet moved on (another epoch) is dropped."""
    store.exchange(key, batch(command=Command.ISOLATE))
    store.exchange(key, batch(command=Command.CLOSE, epoch=1))  # epoch 2, closed by hand
    assert store.exchange(key, batch(0, 50, epoch=0)).state == StateCode.CLOSED
    assert store.exchange(key, batch(0, 10, epoch=2)).state == StateCode.OPEN


def test_the_window_forgets_outcomes_older_than_the_sampling_duration(store: RedisCircuitStateStore, key: str) -> None:
    """Buckets are server time: failures older than `sampling_duration` no longer count."""
    store.exchange(key, batch(0, 9, sampling=0.2))
    time.sleep(0.25)
    assert store.exchange(key, batch(0, 1, sampling=0.2)).state == StateCode.CLOSED
    assert store.exchange(key, batch(0, 9, sampling=0.2)).state == StateCode.OPEN


def test_one_probe_is_granted_per_break_and_its_outcome_closes_or_reopens(
    store: RedisCircuitStateStore, key: str
) -> None:
    """Claims before the break ends fail; after it, exactly one wins until its lease ends."""
    opened = store.exchange(key, batch(0, 10, brk=0.2))
    assert opened.state == StateCode.OPEN
    assert not store.exchange(key, batch(command=Command.CLAIM_PROBE, epoch=1, brk=0.2)).granted
    time.sleep(0.25)
    won = store.exchange(key, batch(command=Command.CLAIM_PROBE, epoch=1, brk=0.2))
    assert (won.granted, won.state, won.epoch) == (True, StateCode.HALF_OPEN, 2)
    lost = [store.exchange(key, batch(command=Command.CLAIM_PROBE, epoch=1, brk=0.2)) for _ in range(5)]
    assert not any(reply.granted for reply in lost)
    assert not store.exchange(key, batch(command=Command.PROBE_FAILED, about=1, epoch=2)).granted  # stale epoch
    failed = store.exchange(key, batch(command=Command.PROBE_FAILED, about=2, epoch=2, brk=0.2))
    assert (failed.granted, failed.state, failed.epoch) == (True, StateCode.OPEN, 3)
    time.sleep(0.25)
    assert store.exchange(key, batch(command=Command.CLAIM_PROBE, epoch=3, brk=0.2)).granted
    closed = store.exchange(key, batch(command=Command.PROBE_SUCCEEDED, about=4, epoch=4))
    assert (closed.state, closed.epoch, closed.manual) == (StateCode.CLOSED, 5, False)


def test_a_probe_lease_that_ran_out_is_granted_again(store: RedisCircuitStateStore, key: str) -> None:
    """A hung probe holds the fleet's slot for one break only."""
    store.exchange(key, batch(0, 10, brk=0.1))
    time.sleep(0.15)
    assert store.exchange(key, batch(command=Command.CLAIM_PROBE, epoch=1, brk=0.1)).granted
    time.sleep(0.15)
    again = store.exchange(key, batch(command=Command.CLAIM_PROBE, epoch=1, brk=0.1))
    assert (again.granted, again.epoch) == (True, 3)


def test_a_probe_claimed_just_before_the_break_ends_waits_for_it(store: RedisCircuitStateStore, key: str) -> None:
    """Up to two intervals early the probe is granted, with the wait until the break's end."""
    store.exchange(key, batch(0, 10, brk=0.3, interval=0.1))
    assert not store.exchange(key, batch(command=Command.CLAIM_PROBE, epoch=1, brk=0.3, interval=0.1)).granted
    time.sleep(0.15)
    early = store.exchange(key, batch(command=Command.CLAIM_PROBE, epoch=1, brk=0.3, interval=0.1))
    assert (early.granted, early.state, early.epoch) == (True, StateCode.HALF_OPEN, 2)
    assert 0.0 < early.wait <= 0.15
    assert early.remaining > early.wait + 0.29  # the lease starts at the break's end


def test_an_unused_probe_is_renewed_until_another_process_asks(store: RedisCircuitStateStore, key: str) -> None:
    """The holder keeps its probe past the lease while alone; one claim from elsewhere ends that."""
    store.exchange(key, batch(0, 10, brk=0.1))
    time.sleep(0.15)
    assert store.exchange(key, batch(command=Command.CLAIM_PROBE, epoch=1, brk=0.1)).granted
    for _ in range(3):
        time.sleep(0.06)
        renewed = store.exchange(key, batch(command=Command.RENEW_PROBE, about=2, epoch=2, brk=0.1))
        assert (renewed.granted, renewed.epoch) == (True, 2)
        assert renewed.remaining > 0.09
    assert not store.exchange(key, batch(command=Command.CLAIM_PROBE, epoch=2, brk=0.1)).granted  # wanted elsewhere
    assert not store.exchange(key, batch(command=Command.RENEW_PROBE, about=2, epoch=2, brk=0.1)).granted
    time.sleep(0.12)
    taken = store.exchange(key, batch(command=Command.CLAIM_PROBE, epoch=2, brk=0.1))
    assert (taken.granted, taken.epoch) == (True, 3)
    assert not store.exchange(key, batch(command=Command.RENEW_PROBE, about=2, epoch=3, brk=0.1)).granted


def test_isolation_and_closing_by_hand(store: RedisCircuitStateStore, key: str, sync_redis: Any) -> None:
    """Manual moves are manual for every reader and always answer granted."""
    isolated = store.exchange(key, batch(command=Command.ISOLATE))
    assert (isolated.state, isolated.manual, isolated.granted) == (StateCode.ISOLATED, True, True)
    assert store.exchange(key, batch(command=Command.ISOLATE, epoch=1)).epoch == 1  # already isolated
    assert store.exchange(key, batch(epoch=1)).state == StateCode.ISOLATED
    closed = store.exchange(key, batch(command=Command.CLOSE, epoch=1))
    assert (closed.state, closed.manual, closed.epoch) == (StateCode.CLOSED, True, 2)
    assert store.exchange(key, batch(command=Command.CLOSE, epoch=2)).epoch == 2
    assert 0 < sync_redis.pttl(store.key(key)) <= 70_000


def test_an_opening_made_alone_is_taken_only_by_a_closed_circuit(store: RedisCircuitStateStore, key: str) -> None:
    """Command OPEN (a process opened while cut off) opens a closed circuit for its break."""
    reply = store.exchange(key, batch(command=Command.OPEN, remaining=2.0))
    assert (reply.state, reply.granted) == (StateCode.OPEN, True)
    assert 1.9 < reply.remaining <= 2.0
    assert not store.exchange(key, batch(command=Command.OPEN, epoch=1, remaining=2.0)).granted


def test_lost_data_comes_back_from_the_callers_memory(
    store: RedisCircuitStateStore, key: str, deployment: Deployment
) -> None:
    """After a flush, a caller that knew the circuit open writes it back, same epoch, break left."""
    store.exchange(key, batch(0, 10))
    deployment.flushall()
    restored = store.exchange(key, batch(epoch=1, state=StateCode.OPEN, remaining=3.0))
    assert (restored.state, restored.epoch) == (StateCode.OPEN, 1)
    assert 2.9 < restored.remaining <= 3.0
    deployment.flushall()
    store.exchange(key, batch())  # a newcomer writes closed at epoch 0 first ...
    later = store.exchange(key, batch(epoch=1, state=StateCode.HALF_OPEN))  # ... a later epoch wins
    # A probe under way keeps its epoch and a lease, so that its outcome still lands.
    assert (later.state, later.epoch, later.remaining) == (StateCode.HALF_OPEN, 1, 5.0)
    assert store.exchange(key, batch(command=Command.PROBE_SUCCEEDED, about=1, epoch=1)).state == StateCode.CLOSED
    deployment.flushall()
    isolated = store.exchange(key, batch(epoch=7, state=StateCode.ISOLATED))
    assert (isolated.state, isolated.epoch) == (StateCode.ISOLATED, 7)


def test_a_move_made_before_the_first_exchange_takes_a_new_epoch(store: RedisCircuitStateStore, key: str) -> None:
    """A circuit isolated (or closed, or opened alone) before its key exists writes back a state
    that already holds its own move: the move still takes a new epoch, so that members at epoch 0
    (which believe it closed) learn it. Found in CI: the other member never saw the isolation."""
    isolated = store.exchange(key, batch(command=Command.ISOLATE, state=StateCode.ISOLATED))
    assert (isolated.state, isolated.epoch) == (StateCode.ISOLATED, 1)
    assert store.exchange(key, batch()).epoch == 1  # a member at epoch 0 hears of it
    other = f"{key}-alone"
    opened = store.exchange(other, batch(command=Command.OPEN, state=StateCode.OPEN, remaining=3.0))
    assert (opened.state, opened.epoch) == (StateCode.OPEN, 1)


def test_the_script_is_loaded_again_after_a_script_flush(
    store: RedisCircuitStateStore, key: str, deployment: Deployment
) -> None:
    """EVALSHA answers NOSCRIPT after SCRIPT FLUSH; the store recovers with one EVAL."""
    store.exchange(key, batch(1))
    deployment.script_flush()
    assert store.exchange(key, batch(1)).state == StateCode.CLOSED


async def test_the_async_exchange_is_the_same_script(async_redis: Any, key: str) -> None:
    """`exchange_async` over an asyncio client decides the same way."""
    store = RedisCircuitStateStore(async_client=async_redis)
    assert (await store.exchange_async(key, batch(0, 10))).state == StateCode.OPEN
    assert not store.has_sync_client
    assert store.key(key) == f"circuit:{key}"


def test_client_forms_and_key_checks(sync_redis: Any) -> None:
    """At least one client; keys must be text."""
    with pytest.raises(ValidationError, match="RedisCircuitStateStore"):
        RedisCircuitStateStore()
    store = RedisCircuitStateStore(sync_redis)
    with pytest.raises(ValidationError, match="circuit_key"):
        store.key(3)  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match="needs an asyncio client"):
        store._async_runner("exchange_async")
    assert "RedisCircuitStateStore(prefix='circuit'" in repr(store)
