"""After os.fork() the child never renews, extends or releases the leases it inherited."""

from __future__ import annotations

import os
import sys
import warnings
from typing import TYPE_CHECKING

import pytest

from resilience import LockLostError, get_context
from resilience._lease import LeaseParams, LockOps, acquire_lease
from tests.unit.lockkit import FaultyStore, build, idle, step

if TYPE_CHECKING:
    from resilience.testing import FakeTimeProvider

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")


def _fork() -> int:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # Python 3.12+: fork with threads
        return os.fork()


def _child_exit(ok: bool) -> None:
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0 if ok else 1)


def test_a_child_abandons_the_leases_it_inherited(clock: FakeTimeProvider) -> None:
    """In the child the signal is aborted and no renew/extend/release is ever sent."""
    store = FaultyStore(clock)
    params = LeaseParams(ttl=3.0, renew_interval=1.0)
    lease, _ = acquire_lease(LockOps(store), "job", params=params, schedule=None, time_provider=clock, signal=None)
    assert lease is not None
    step(clock, 1.0)
    calls = len(store.calls)
    pid = _fork()
    if pid == 0:  # pragma: no cover - the child reports through its exit code
        ok = isinstance(lease.signal.reason, LockLostError)
        clock.advance(5.0)  # renewals would be due: none may be sent
        ok = ok and lease.extend() is False
        ok = ok and lease.release() is False
        ok = ok and isinstance(lease.finish(), LockLostError)
        ok = ok and len(store.calls) == calls
        _child_exit(ok)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    # The parent still holds and renews the lease.
    assert not lease.signal.aborted
    step(clock, 2.0)
    assert not lease.lost
    assert lease.finish() is None
    assert store.count("release") == 1


def test_a_callable_that_forks_does_not_release_in_the_child(clock: FakeTimeProvider) -> None:
    """The child returns through the strategy without a release; the parent's lease is intact."""
    store = FaultyStore(clock)
    pipeline = build(clock, store=store, ttl=3.0)
    parent = os.getpid()
    before: list[int] = []

    def job() -> str:
        before.append(len(store.calls))
        if _fork() == 0:  # pragma: no cover - the child
            context = get_context()
            assert context is not None
            return "child" if isinstance(context.signal.reason, LockLostError) else "child-not-aborted"
        return "parent"

    result = pipeline.settle(job)
    if os.getpid() != parent:  # pragma: no cover - the child reports through its exit code
        _child_exit(result.value == "child" and len(store.calls) == before[0])
    _, status = os.waitpid(-1, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert result.value == "parent"
    idle()
    assert store.count("release") == 1


def test_the_fork_hooks_run_in_the_child_in_order_past_a_failing_one() -> None:
    """One registry runs every module's fork hook in the child, in registration order; a hook that raises does not stop the rest."""
    from resilience._runtime import _threads

    ran: list[str] = []

    def failing() -> None:
        ran.append("failing")
        raise RuntimeError("boom")

    hooks = [lambda: ran.append("first"), failing, lambda: ran.append("last")]
    for hook in hooks:
        _threads.on_fork_in_child(hook)
    try:
        pid = _fork()
        if pid == 0:  # pragma: no cover - the child reports through its exit code
            _child_exit(ran == ["first", "failing", "last"])
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        assert ran == []  # the parent runs none of them
    finally:
        for hook in hooks:
            _threads._IN_CHILD.remove(hook)


def test_a_child_never_reuses_the_owner_ids_its_parent_drew() -> None:
    """Owner ids are read from os.urandom in batches: a forked child draws its own, not the parent's unused ones."""
    from resilience._lease import new_owner

    new_owner()  # the parent now holds a batch of unused ids
    read, write = os.pipe()
    pid = _fork()
    if pid == 0:  # pragma: no cover - the child
        os.close(read)
        os.write(write, "".join(new_owner() for _ in range(3)).encode())
        _child_exit(True)
    os.close(write)
    with os.fdopen(read) as pipe:
        drawn = pipe.read()
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    child = {drawn[n : n + 32] for n in range(0, len(drawn), 32)}
    parent = {new_owner() for _ in range(3)}
    assert len(child) == 3
    assert not child & parent
