"""`ResilienceContext._derive_linked`: a child signal made on first read, equivalent to an eager one."""

import threading

from resilience import ResilienceContext, ResiliencePropertyKey, Signal

USER = ResiliencePropertyKey[str]("user")


def test_the_linked_signal_is_made_on_first_read_as_a_child() -> None:
    """Nothing is registered in the parent until the signal is read; then it follows the parent."""
    caller = Signal()
    parent = ResilienceContext(operation_key="op", properties={USER: "ann"}, signal=caller)
    child = parent.derive_scope(attempt=2)
    assert child.operation_key == "op"
    assert child.properties[USER] == "ann"
    assert child.attempt == 2
    assert parent.derive_scope().attempt == 0
    assert caller._callbacks is None  # no registration yet
    signal = child.signal
    assert signal is child.signal
    assert signal is not caller
    reason = RuntimeError("stop")
    caller.abort(reason)
    assert signal.reason is reason


def test_an_abort_before_the_first_read_is_seen() -> None:
    """The parent's abort reaches the linked signal even when it was read only afterwards."""
    caller = Signal()
    child = ResilienceContext(signal=caller).derive_scope()
    assert child.abort_reason is None
    reason = RuntimeError("stop")
    caller.abort(reason)
    assert child.abort_reason is reason
    assert child.signal.reason is reason


def test_the_reason_is_found_through_unread_links() -> None:
    """`_abort_reason` walks a chain of linked contexts without making their signals."""
    caller = Signal()
    inner = ResilienceContext(signal=caller).derive_scope().derive_scope()
    caller.abort()
    assert isinstance(inner.abort_reason, Exception)
    assert inner._signal is None
    assert ResilienceContext().derive_scope().abort_reason is None
    assert inner.signal.aborted


def test_ending_the_scope_detaches_a_signal_that_was_read() -> None:
    """After the scope ends the parent keeps no reference, and its abort no longer reaches the child."""
    caller = Signal()
    child = ResilienceContext(signal=caller).derive_scope()
    signal = child.signal
    child.end_scope()
    assert not caller._callbacks
    caller.abort()
    assert not signal.aborted


def test_a_read_after_the_scope_ended_is_detached() -> None:
    """A first read after the scope ended gets what a detached child would be: the abort state so far."""
    caller = Signal()
    child = ResilienceContext(signal=caller).derive_scope()
    child.end_scope()
    signal = child.signal
    assert not signal.aborted
    assert not caller._callbacks
    caller.abort()
    assert not signal.aborted
    aborted = Signal()
    late = ResilienceContext(signal=aborted).derive_scope()
    late.end_scope()
    aborted.abort()
    assert late.signal.aborted


def test_concurrent_first_reads_get_one_signal() -> None:
    """Threads reading the signal at once all get the same child."""
    caller = Signal()
    child = ResilienceContext(signal=caller).derive_scope()
    seen: list[Signal] = []
    barrier = threading.Barrier(4)

    def read() -> None:
        barrier.wait()
        seen.append(child.signal)

    threads = [threading.Thread(target=read) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len({id(s) for s in seen}) == 1
    assert len(caller._callbacks or {}) == 1
