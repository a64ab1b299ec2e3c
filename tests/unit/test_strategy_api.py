"""The public API a custom strategy gets is the one the built-in strategies use."""

from __future__ import annotations

import asyncio
import gc
import pathlib
import re
import threading
import weakref
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
    ValidationError,
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
    given: dict[ResiliencePropertyKey[Any], Any] = {NOTE: "child", LOCK_TOKEN: 7}
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
    before = inner.abort_reason
    assert before is None
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


class FreshContext:
    """A custom strategy that hands the inner part a context it made itself, not a derived one."""

    def execute(self, callback: Callable[[ResilienceContext], T], context: ResilienceContext, /) -> T:
        return callback(ResilienceContext(operation_key="made here"))

    async def execute_async(
        self, callback: Callable[[ResilienceContext], Awaitable[T]], context: ResilienceContext, /
    ) -> T:
        return await callback(ResilienceContext(operation_key="made here"))


def test_a_context_the_strategy_made_itself_still_reaches_the_callable() -> None:
    """The chain is composed once at build; the call is found even under a context not derived from the execution's."""
    pipeline = ResiliencePipelineBuilder().add_retry(max_retries=1, delay=0).build()
    custom = PipelineBuilder().add(FreshContext()).build()

    def key() -> str | None:
        context = get_context()
        return None if context is None else context.operation_key

    assert custom.execute(key) == "made here"
    assert pipeline.execute(lambda: custom.execute(key)) == "made here"  # nested in another execution

    async def key_async() -> str | None:
        return key()

    assert asyncio.run(custom.execute_async(key_async)) == "made here"


@pytest.mark.parametrize("derived", [True, False], ids=["derived", "fresh"])
def test_a_bare_thread_reaches_the_callable_with_a_derived_context_only(derived: bool) -> None:
    """On a bare thread the call travels on the context: derived works, a fresh one is refused clearly."""

    class BareThread:
        def execute(self, callback: Callable[[ResilienceContext], T], context: ResilienceContext, /) -> T:
            out: list[BaseException | T] = []

            def run() -> None:
                try:
                    out.append(callback(context.derive() if derived else ResilienceContext()))
                except BaseException as exc:
                    out.append(exc)

            thread = threading.Thread(target=run)
            thread.start()
            thread.join(5)
            if isinstance(out[0], BaseException):
                raise out[0]
            return out[0]

        async def execute_async(self, callback: Any, context: ResilienceContext, /) -> Any:
            raise NotImplementedError

    pipeline = PipelineBuilder().add(BareThread()).build()
    if derived:
        assert pipeline.execute(lambda: 1) == 1
    else:
        with pytest.raises(ValidationError, match="does not carry the execution's context"):
            pipeline.execute(lambda: 1)


def test_calling_the_rest_of_the_pipeline_after_the_execution_ended_is_refused() -> None:
    """A callback kept and called after its execution returned runs nothing."""
    kept: list[tuple[Callable[[ResilienceContext], Any], ResilienceContext]] = []

    class Keeper:
        def execute(self, callback: Callable[[ResilienceContext], T], context: ResilienceContext, /) -> T:
            kept.append((callback, context))
            return callback(context)

        async def execute_async(self, callback: Any, context: ResilienceContext, /) -> Any:
            raise NotImplementedError

    calls: list[int] = []
    PipelineBuilder().add(Keeper()).build().execute(calls.append, 1)
    callback, context = kept[0]
    with pytest.raises(ValidationError, match="after its execution ended"):
        callback(context)
    assert calls == [1]


def test_a_context_kept_after_the_execution_keeps_no_argument_alive() -> None:
    """The call's arguments are dropped when the execution ends, even if its contexts live on."""

    class Payload:
        pass

    kept: list[ResilienceContext] = []

    def body(payload: Payload) -> None:
        context = get_context()
        assert context is not None
        kept.append(context)

    payload = Payload()
    alive = weakref.ref(payload)
    pipeline = ResiliencePipelineBuilder().add_retry(max_retries=1, delay=0).add_timeout(5.0).build()
    pipeline.execute(body, payload)
    del payload
    gc.collect()
    assert kept
    assert alive() is None

    async def body_async(payload: Payload) -> None:
        body(payload)

    payload = Payload()
    alive = weakref.ref(payload)
    asyncio.run(pipeline.execute_async(body_async, payload))
    del payload
    gc.collect()
    assert alive() is None
