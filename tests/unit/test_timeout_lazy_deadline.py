"""The sync timeout's deadline schedules no timer until the signal is read, and looks the same as an eager one."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from resilience import (
    ResilienceContext,
    ResiliencePipelineBuilder,
    TimeoutRejectedError,
    get_context,
)

if TYPE_CHECKING:
    from resilience import ResiliencePipeline
    from resilience.strategies import OnTimeoutArguments
    from resilience.testing import FakeTimeProvider


def context() -> ResilienceContext:
    current = get_context()
    assert current is not None
    return current


def build(clock: FakeTimeProvider, timeouts: list[OnTimeoutArguments] | None = None) -> ResiliencePipeline:
    on_timeout = None if timeouts is None else timeouts.append
    return ResiliencePipelineBuilder(time_provider=clock).add_timeout(5.0, on_timeout=on_timeout).build()


def test_no_timer_unless_the_signal_is_read(clock: FakeTimeProvider) -> None:
    """A callable that never reads its signal leaves the clock without a timer, even while it runs."""
    pending: list[int] = []
    assert build(clock).execute(lambda: pending.append(clock.pending_timers)) is None
    assert pending == [0]

    def reads() -> None:
        assert not context().signal.aborted
        pending.append(clock.pending_timers)

    build(clock).execute(reads)
    assert pending == [0, 1]  # the first read armed the deadline
    assert clock.pending_timers == 0  # and the end of the scope cancelled it


def test_a_read_after_the_deadline_passed_sees_the_abort(clock: FakeTimeProvider) -> None:
    """Time passing unobserved, then a read: the signal is already aborted, as an eager timer would have left it."""
    seen: list[BaseException | None] = []

    def slow() -> None:
        clock.advance(6.0)
        seen.append(context().signal.reason)

    assert build(clock).execute(slow) is None  # a return value is returned, as ever
    assert isinstance(seen[0], TimeoutRejectedError)
    assert clock.pending_timers == 0


def test_an_exception_after_an_unobserved_deadline_becomes_a_timeout(clock: FakeTimeProvider) -> None:
    """The deadline is compared with the clock when an exception ends the callable."""
    timeouts: list[OnTimeoutArguments] = []
    error = ConnectionError("late")

    def late_failure() -> None:
        clock.advance(5.0)
        raise error

    with pytest.raises(TimeoutRejectedError) as caught:
        build(clock, timeouts).execute(late_failure)
    assert caught.value.__cause__ is error
    assert [a.timeout for a in timeouts] == [5.0]


def test_an_exception_in_time_is_not_a_timeout(clock: FakeTimeProvider) -> None:
    """Just before the deadline, the callable's own exception propagates unchanged."""

    def early_failure() -> None:
        clock.advance(4.999)
        raise KeyError("x")

    with pytest.raises(KeyError):
        build(clock).execute(early_failure)


def test_a_context_kept_past_the_scope_reads_as_aborted(clock: FakeTimeProvider) -> None:
    """A deadline that passed during the scope, unobserved, is still what a later read sees."""
    kept: list[ResilienceContext] = []

    def slow() -> int:
        kept.append(context())
        clock.advance(5.0)
        return 1

    assert build(clock).execute(slow) == 1
    assert isinstance(kept[0].signal.reason, TimeoutRejectedError)
    in_time: list[ResilienceContext] = []
    assert build(clock).execute(lambda: in_time.append(context())) is None
    clock.advance(10.0)
    assert not in_time[0].signal.aborted  # the scope ended before its deadline


def test_a_deadline_passed_before_the_callable_starts_keeps_it_from_starting(clock: FakeTimeProvider) -> None:
    """An inner strategy that takes the time away: the callable is not started, the timeout is reported."""

    class Slow:
        def execute(self, callback: Any, context: ResilienceContext) -> Any:
            clock.advance(5.0)
            return callback(context)

        async def execute_async(self, callback: Any, context: ResilienceContext) -> Any:
            return await callback(context)

    calls: list[int] = []
    pipeline = ResiliencePipelineBuilder(time_provider=clock).add_timeout(5.0).add(Slow()).build()
    with pytest.raises(TimeoutRejectedError):
        pipeline.execute(lambda: calls.append(1))
    assert calls == []
