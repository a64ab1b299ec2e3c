"""Leader election (`resilience.primitives.election`) on every store: memory, Redis standalone and
Cluster, PostgreSQL; sync and asyncio. The multi-process kill test is in test_election_processes.py.
"""

from __future__ import annotations

import asyncio
import os
import socket
import threading
import uuid
from typing import TYPE_CHECKING, Any

import pytest

from resilience import LockLeaseLostError, LockNotAcquiredError, Signal, ValidationError, get_lock_token, use_context
from resilience.primitives import Election, LeaderInfo, election, lock
from resilience.stores import MemoryLockStore
from resilience.testing import capture_events

if TYPE_CHECKING:
    from resilience.primitives import LockHandle
    from tests.primitives.conftest import Backend

EVENTUALLY = 20.0
"""A generous bound for "eventually" on a loaded machine (seconds)."""


def _key() -> str:
    return f"sched-{uuid.uuid4().hex[:12]}"


def _until(predicate: Any, timeout: float = EVENTUALLY) -> None:
    done = threading.Event()
    for _ in range(int(timeout / 0.01)):
        if predicate():
            return
        done.wait(0.01)
    raise AssertionError("condition not met in time")


def _waiters(backend: Backend, key: str) -> int | None:
    info = lock(backend.lock_store, prefix="election").info(key)
    return None if info is None else info.waiters


def test_the_leader_leads_with_its_term_and_identity(backend: Backend) -> None:
    key = _key()
    candidate = election(backend.lock_store, key, identity="node-a", ttl=5)
    assert candidate.leader() is None
    seen: list[Any] = []

    def lead(handle: LockHandle) -> str:
        seen.extend([handle.token, get_lock_token(), candidate.leader()])
        return "led"

    with capture_events() as events:
        assert candidate.run(lead) == "led"
    term, ambient, info = seen
    assert ambient == term
    assert info == LeaderInfo("node-a", term, info.expires_in)
    assert info.expires_in is not None
    assert 0 < info.expires_in <= 5
    assert candidate.leader() is None  # returning ended the leadership
    assert {event.strategy_name for event in events} == {"Election"}
    assert {"OnLockAcquired", "OnLockReleased"} <= {event.name for event in events}
    # The election is the lock `key` under the prefix "election": `lock(...)` inspects it.
    assert lock(backend.lock_store, prefix="election").info(key) is None


def test_candidates_take_over_in_turn_with_increasing_terms(backend: Backend) -> None:
    """The next candidate leads when the leader steps down (FIFO on the stores that queue)."""
    key = _key()
    order: list[tuple[str, int]] = []
    release_first = threading.Event()
    first_leads = threading.Event()

    def first(handle: LockHandle) -> None:
        order.append(("a", handle.token))
        first_leads.set()
        assert release_first.wait(EVENTUALLY)

    def follower(name: str) -> Any:
        return lambda handle: order.append((name, handle.token))

    threads = [threading.Thread(target=election(backend.lock_store, key, identity="a", ttl=5).run, args=(first,))]
    threads[0].start()
    assert first_leads.wait(EVENTUALLY)
    watcher = election(backend.lock_store, key, ttl=5)
    for queued, name in enumerate(("b", "c"), 1):
        thread = threading.Thread(
            target=election(backend.lock_store, key, identity=name, ttl=5).run, args=(follower(name),)
        )
        thread.start()
        threads.append(thread)
        if backend.records_waiters:  # queued one after the other: b before c
            _until(lambda n=queued: _waiters(backend, key) == n)
    leader = watcher.leader()
    assert leader is not None
    assert (leader.identity, leader.token) == ("a", order[0][1])
    release_first.set()
    for thread in threads:
        thread.join(EVENTUALLY)
    assert order[0][0] == "a"
    if backend.records_waiters:
        assert [name for name, _ in order] == ["a", "b", "c"]
    terms = [term for _, term in order]
    assert terms == sorted(terms)
    assert len(set(terms)) == 3


def test_a_bounded_wait_gives_up(backend: Backend) -> None:
    key = _key()
    holder = lock(backend.lock_store, prefix="election").acquire(key, ttl=30)
    assert holder is not None
    with pytest.raises(LockNotAcquiredError):
        election(backend.lock_store, key).run(lambda handle: None, wait=0.2)
    assert election(backend.lock_store, key).leader() is not None
    assert holder.release()


def test_the_ambient_signal_ends_a_waiting_run_and_it_leaves_the_line(backend: Backend) -> None:
    key = _key()
    holder = lock(backend.lock_store, prefix="election").acquire(key, ttl=30)
    assert holder is not None
    signal = Signal()
    failures: list[BaseException] = []

    def candidate() -> None:
        try:
            with use_context(signal=signal):
                election(backend.lock_store, key).run(lambda handle: None)
        except BaseException as exc:
            failures.append(exc)

    thread = threading.Thread(target=candidate)
    thread.start()
    inspector = lock(backend.lock_store, prefix="election")
    if backend.records_waiters:
        _until(lambda: (info := inspector.info(key)) is not None and info.waiters == 1)
    reason = RuntimeError("shutting down")
    signal.abort(reason)
    thread.join(EVENTUALLY)
    assert failures == [reason]
    if backend.records_waiters:  # it left the line (the leaving release is sent in the background)
        _until(lambda: _waiters(backend, key) == 0)
    assert holder.release()


def test_losing_leadership_aborts_the_signal_and_run_raises_even_when_lead_returns(backend: Backend) -> None:
    key = _key()
    candidate = election(backend.lock_store, key, ttl=1.0)  # renewed every 0.25 s
    told: list[bool] = []

    def lead(handle: LockHandle) -> str:
        assert lock(backend.lock_store, prefix="election").force_release(key)  # an operator's break-glass
        told.append(handle.signal.wait(EVENTUALLY))
        return "returned anyway"

    with pytest.raises(LockLeaseLostError):
        candidate.run(lead)
    assert told == [True]


async def test_the_async_twins(backend: Backend) -> None:
    key = _key()
    candidate = election(backend.lock_store, key, identity="async-node", ttl=5)
    assert await candidate.leader_async() is None

    async def lead(handle: LockHandle) -> int:
        info = await candidate.leader_async()
        assert info is not None
        assert (info.identity, info.token) == ("async-node", handle.token)
        assert get_lock_token() == handle.token
        return handle.token

    term = await candidate.run_async(lead)
    second = await candidate.run_async(lead)
    assert second > term
    assert await candidate.leader_async() is None


async def test_cancelling_a_waiting_async_run_leaves_the_line(backend: Backend) -> None:
    key = _key()
    inspector = lock(backend.lock_store, prefix="election")
    holder = await inspector.acquire_async(key, ttl=30)
    assert holder is not None
    waiting = asyncio.ensure_future(election(backend.lock_store, key).run_async(_never_called))
    if backend.records_waiters:
        for _ in range(2000):
            info = await inspector.info_async(key)
            if info is not None and info.waiters == 1:
                break
            await asyncio.sleep(0.01)
    else:
        await asyncio.sleep(0.2)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    if backend.records_waiters:  # it leaves the line (the leaving release is sent in the background)
        waiters: list[int | None] = []
        for _ in range(2000):
            info = await inspector.info_async(key)
            assert info is not None
            waiters.append(info.waiters)
            if info.waiters == 0:
                break
            await asyncio.sleep(0.01)
        assert waiters[-1] == 0
    assert await holder.release_async()


async def _never_called(handle: LockHandle) -> None:
    raise AssertionError(handle)


class _Untouchable:
    """A lock store that fails any call: bad arguments must be refused before one is made."""

    def acquire(self, key: str, owner: str, ttl: float) -> int | None:
        raise AssertionError(key)

    def renew(self, key: str, owner: str, ttl: float) -> bool:
        raise AssertionError(key)

    def release(self, key: str, owner: str) -> bool:
        raise AssertionError(key)


@pytest.mark.parametrize(
    ("arguments", "option"),
    [
        ({"identity": ""}, "identity"),
        ({"identity": "x" * 257}, "identity"),
        ({"identity": 42}, "identity"),
        ({"ttl": 0}, "ttl"),
        ({"ttl": float("nan")}, "ttl"),
        ({"prefix": ""}, "prefix"),
    ],
)
def test_bad_arguments_are_refused_before_any_store_call(arguments: dict[str, Any], option: str) -> None:
    with pytest.raises(ValidationError, match=option):
        election(_Untouchable(), "scheduler", **arguments)


def test_a_bad_key_or_wait_is_refused() -> None:
    with pytest.raises(ValidationError, match="key"):
        election(_Untouchable(), "")
    with pytest.raises(ValidationError, match="wait"):
        election(_Untouchable(), "k").run(lambda handle: None, wait=-1)
    with pytest.raises(ValidationError, match="wait"):
        election(_Untouchable(), "k").run(lambda handle: None, wait=float("inf"))


def test_identity_defaults_to_host_and_pid_and_is_kept_with_the_lease() -> None:
    store = MemoryLockStore()
    candidate = election(store, "k")
    assert candidate.identity == f"{socket.gethostname()}:{os.getpid()}"
    assert isinstance(candidate, Election)
    assert repr(candidate).startswith("<Election key='k'")
    longest = "n" * 256
    seen = election(store, "k", identity=longest).run(lambda handle: election(store, "k").leader())
    assert seen is not None
    assert seen.identity == longest
    owner = store.info("election:k")
    assert owner is None  # released after the run
    # An owner id that is not an election's is shown as it is.
    held = lock(store, prefix="election").acquire("k")
    assert held is not None
    info = candidate.leader()
    assert info is not None
    assert len(info.identity) == 32  # the plain lock's random owner id
    assert held.release()


def test_a_sync_run_on_an_asyncio_only_client_names_the_client() -> None:
    import redis.asyncio

    client = redis.asyncio.Redis()
    with pytest.raises(ValidationError, match="no sync client"):
        election(client, "k").run(lambda handle: None)
