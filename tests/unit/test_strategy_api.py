"""The public API a custom strategy gets is the one the built-in strategies use."""

from __future__ import annotations

import asyncio
import pathlib
import re
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import pytest

import resilience
from resilience import (
    LOCK_TOKEN,
    PipelineBuilder,
    ResilienceContext,
    ResiliencePipelineBuilder,
    ResiliencePropertyKey,
    Signal,
    get_context,
)
from resilience.strategies import LazyDeadline
from resilience.telemetry import TelemetryOptions

T = TypeVar("T")
NOTE = ResiliencePropertyKey[str]("note")


class Recorder:
    """A pass-through strategy that records the context it was given."""

    def __init__(self) -> None:
        self.seen: list[ResilienceContext] = []

    def execute(self, callback: Callable[[ResilienceContext], T], context: ResilienceContext, /) -> T:
        self.seen.append(context)
        return callback(context)

    async def execute_async(
        self, callback: Callable[[ResilienceContext], Awaitable[T]], context: ResilienceContext, /
    ) -> T:
        self.seen.append(context)
        return await callback(context)


def test_quiet_says_whether_anything_hears_the_execution() -> None:
    """`quiet` is True when nothing listens, False with a listener; derived contexts inherit it."""
    recorder = Recorder()
    PipelineBuilder().add(recorder).build().execute(lambda: None)
    heard = Recorder()
    PipelineBuilder(telemetry=TelemetryOptions(listeners=[lambda _event: None])).add(heard).build().execute(
        lambda: None
    )
    assert recorder.seen[0].quiet
    assert recorder.seen[0].derive().quiet
    assert recorder.seen[0].derive_scope().quiet
    assert not heard.seen[0].quiet
    assert not ResilienceContext().quiet


def test_derive_with_properties_sets_them_on_the_child_only() -> None:
    """`derive(properties=...)` gives the child its own values over the parent's; the mapping is copied."""
    parent = ResilienceContext(properties={NOTE: "parent"})
    given = {NOTE: "child", LOCK_TOKEN: 7}
    child = parent.derive(properties=given)
    given[NOTE] = "changed later"
    assert child.properties[NOTE] == "child"
    assert child.properties[LOCK_TOKEN] == 7
    assert parent.properties[NOTE] == "parent"
    assert LOCK_TOKEN not in parent.properties
    assert ResilienceContext().derive(properties={NOTE: "x"}).properties.get(NOTE) == "x"


def test_raise_if_aborted_and_abort_reason_see_the_callers_abort_without_making_a_signal() -> None:
    """Through unread scopes, the caller's abort is seen; no scope signal is made by looking."""
    caller = Signal()
    inner = ResilienceContext(signal=caller).derive_scope().derive_scope()
    inner.raise_if_aborted()
    assert inner.abort_reason is None
    reason = RuntimeError("stop")
    caller.abort(reason)
    assert inner.abort_reason is reason
    with pytest.raises(RuntimeError) as caught:
        inner.raise_if_aborted()
    assert caught.value is reason
    assert inner._signal is None  # nothing was made to answer


class StepDeadline:
    """A `LazyDeadline` that passes when told to; records the signal it is armed with."""

    def __init__(self) -> None:
        self.due = False
        self.armed: list[Signal] = []

    def arm(self, signal: Signal, /) -> None:
        self.armed.append(signal)
        if self.due:
            signal.abort(TimeoutError("due"))

    def passed(self) -> bool:
        return self.due


def test_a_lazy_deadline_is_armed_when_the_signal_is_made_and_checked_before_that() -> None:
    """No arming until someone reads the signal; a passed deadline is seen by `raise_if_aborted`."""
    deadline = StepDeadline()
    checked: LazyDeadline = deadline  # the protocol a custom deadline implements
    scope = ResilienceContext().derive_scope(deadline=checked)
    scope.raise_if_aborted()
    assert deadline.armed == []
    signal = scope.signal
    assert deadline.armed == [signal]
    late = StepDeadline()
    other = ResilienceContext().derive_scope(deadline=late)
    late.due = True
    with pytest.raises(TimeoutError):
        other.raise_if_aborted()  # the walk made the signal, whose arming aborted it
    assert late.armed == [other.signal]
    assert other.signal.aborted


def test_every_attempt_of_retry_runs_in_its_own_scope() -> None:
    """The retry strategy's attempts see distinct signals, each a child of the caller's."""
    signals: list[Signal] = []

    def flaky() -> str:
        context = get_context()
        assert context is not None
        signals.append(context.signal)
        if len(signals) < 3:
            raise ConnectionError
        return "ok"

    pipeline = ResiliencePipelineBuilder().add_retry(max_retries=3, delay=0, handle=ConnectionError).build()
    assert pipeline.execute(flaky) == "ok"
    assert len(set(map(id, signals))) == 3


async def test_the_async_timeout_leaves_nothing_registered_in_the_callers_signal() -> None:
    """The timeout's child signal and its cancel scope are gone from the caller's signal after the call."""
    caller = Signal()
    pipeline = ResiliencePipelineBuilder().add_timeout(5.0).build()

    async def body() -> int:
        await asyncio.sleep(0)
        return 1

    with resilience.use_context(signal=caller):
        assert await pipeline.execute_async(body) == 1
    assert not caller._callbacks


PRIVATE_HOOK = re.compile(
    r"\b(?:context|inner|ctx|scope|outer|parent)\._(?:derive_linked|end_signal_scope|raise_if_aborted|abort_reason|"
    r"quiet|properties|deadline|signal_source)\b|\._adopt\("
)


def test_no_built_in_strategy_uses_a_private_context_hook() -> None:
    """The built-in strategies reach the context only through what a custom strategy gets."""
    root = pathlib.Path(resilience.__file__).parent
    offenders: list[Any] = []
    for folder in ("strategies", "limiters", "http"):
        for path in sorted((root / folder).glob("*.py")):
            for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                if PRIVATE_HOOK.search(line):
                    offenders.append(f"{path.name}:{number}: {line.strip()}")
    assert offenders == []
