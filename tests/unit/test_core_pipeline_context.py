"""Pipeline, context, outcome and errors: the foundation the strategies stand on."""

from __future__ import annotations

import asyncio
import functools
import logging
import pickle
from typing import Any

import pytest

import resilience
import resilience.stores
from resilience import (
    LOCK_TOKEN,
    BrokenCircuitError,
    Err,
    IsolatedCircuitError,
    LockLostError,
    LockNotAcquiredError,
    Ok,
    OperationAbortedError,
    Outcome,
    PipelineBuilder,
    ResilienceContext,
    ResilienceProperties,
    ResiliencePropertyKey,
    SemaphoreLeaseLostError,
    Signal,
    TimeoutRejectedError,
    ValidationError,
    get_context,
    get_lock_token,
    is_rejection,
    use_context,
)
from resilience.telemetry import Severity, TelemetryEvent, TelemetryOptions

KEY: ResiliencePropertyKey[str] = ResiliencePropertyKey("k")


def test_public_names_resolve() -> None:
    """Every name in the package's and the stores module's `__all__` resolves."""
    for module in (resilience, resilience.stores):
        assert all(hasattr(module, name) for name in module.__all__)


# -- properties and context ----------------------------------------------------------------------


def test_property_keys_compare_by_name_and_are_frozen() -> None:
    """Keys are equal by name, hashable, immutable and picklable."""
    assert ResiliencePropertyKey("k") == KEY
    assert hash(ResiliencePropertyKey("k")) == hash(KEY)
    assert KEY != "k"
    assert KEY.name == "k"
    assert repr(KEY) == "ResiliencePropertyKey('k')"
    assert pickle.loads(pickle.dumps(KEY)) == KEY
    with pytest.raises(AttributeError):
        KEY.x = 1  # type: ignore[attr-defined]


def test_properties_copy_on_write() -> None:
    """A child reads through to its parent; writes stay in the child."""
    parent = ResilienceProperties({KEY: "a"})
    child = parent.child()
    other: ResiliencePropertyKey[int] = ResiliencePropertyKey("n")
    child.set(other, 1)
    assert child[KEY] == "a"
    assert child.get(other) == 1
    assert parent.get(other) is None
    assert parent.get(other, 5) == 5
    assert other in child
    assert other not in parent
    assert "n" not in child
    with pytest.raises(KeyError):
        parent[other]
    child.set(KEY, "b")
    assert (parent[KEY], child[KEY]) == ("a", "b")
    assert child.to_dict() == {KEY: "b", other: 1}
    assert set(child) == {KEY, other}
    assert len(child) == 2
    assert "ResilienceProperties" in repr(child)


def test_context_derive_and_accessors() -> None:
    """A derived context keeps the key, layers the properties and takes a signal and attempt."""
    signal = Signal()
    context = ResilienceContext(operation_key="op", properties={KEY: "v"}, signal=signal)
    child = context.derive(attempt=2)
    assert (child.operation_key, child.attempt, child.signal) == ("op", 2, signal)
    assert child.properties[KEY] == "v"
    child.properties.set(KEY, "w")
    assert context.properties[KEY] == "v"
    shared = ResilienceContext(properties=context.properties)
    assert shared.properties is context.properties
    bare = ResilienceContext()
    assert bare.derive().properties is not None
    assert isinstance(bare.signal, Signal)
    assert "op" in repr(context)


def test_use_context_overrides_and_lock_token() -> None:
    """use_context makes a context ambient; keywords override a given context; lock token lookup."""
    base = ResilienceContext(operation_key="base")
    assert get_context() is None
    assert get_lock_token() is None
    signal = Signal()
    with use_context(base, operation_key="other", properties={LOCK_TOKEN: 7}, signal=signal) as context:
        assert get_context() is context
        assert context.operation_key == "other"
        assert context.signal is signal
        assert get_lock_token() == 7
        assert get_lock_token(base) is None
        assert base.operation_key == "base"
    with use_context(base) as same:
        assert same is base
    with use_context(operation_key="kw") as built:
        assert built.operation_key == "kw"
        assert get_lock_token() is None
    assert get_context() is None


# -- outcome ---------------------------------------------------------------------------------------


def test_outcome_api() -> None:
    """Ok and Err: value, error, flags, unwrap, match, equality, hashing, immutability, pickling."""
    ok: Outcome[int] = Outcome.ok(1)
    error = ValueError("x")
    err = Outcome.failure(error)
    assert (ok.value, ok.error, ok.is_ok, ok.is_error) == (1, None, True, False)
    assert (err.value, err.error, err.is_ok, err.is_error) == (None, error, False, True)
    assert ok.unwrap() == 1
    with pytest.raises(ValueError):
        err.unwrap()
    assert ok.match(ok=str, err=repr) == "1"
    assert err.match(ok=str, err=lambda e: "bad") == "bad"
    assert Ok(1) == ok
    assert Ok(1) != Err(error)
    assert Err(error) == err
    assert Err(error) != Ok(1)
    assert len({Ok(1), Ok(1), Err(error), Err(error)}) == 2
    assert (repr(ok), repr(err)) == ("Ok(1)", "Err(ValueError('x'))")
    assert pickle.loads(pickle.dumps(ok)) == ok
    assert isinstance(pickle.loads(pickle.dumps(err)).error, ValueError)
    with pytest.raises(AttributeError):
        ok.x = 1  # type: ignore[attr-defined]
    with pytest.raises(AttributeError):
        err.x = 1  # type: ignore[attr-defined]


# -- errors ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "error",
    [
        ValidationError(["a: bad", "b: worse"]),
        OperationAbortedError(),
        LockNotAcquiredError("k", 1.5),
        BrokenCircuitError(retry_after=2.0),
        IsolatedCircuitError(),
        TimeoutRejectedError(timeout=3.0),
        TimeoutRejectedError(),
        LockLostError("k", 9),
        SemaphoreLeaseLostError("k", 3),
    ],
)
def test_errors_pickle_with_their_attributes(error: Exception) -> None:
    """Every error survives pickle with its attributes and message."""
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is type(error)
    assert str(copy) == str(error)
    assert vars(copy) == vars(error)


def test_is_rejection() -> None:
    """Rejections, and groups of only rejections, are rejections."""
    assert is_rejection(BrokenCircuitError())
    assert is_rejection(ExceptionGroup("g", [BrokenCircuitError(), LockNotAcquiredError("k")]))
    assert not is_rejection(ExceptionGroup("g", [BrokenCircuitError(), ValueError()]))
    assert not is_rejection(TimeoutRejectedError())
    assert "2 problems" in str(ValidationError(["a", "b"]))


# -- pipeline --------------------------------------------------------------------------------------


def test_builder_reports_bad_pipeline_options() -> None:
    """Bad pipeline-level options and non-strategies are reported by build()."""
    builder = PipelineBuilder(name="", time_provider=object(), telemetry=object())  # type: ignore[arg-type]
    builder.add(object())  # type: ignore[arg-type]
    with pytest.raises(ValidationError) as caught:
        builder.build()
    assert [p.split(":")[0] for p in caught.value.problems] == [
        "Pipeline.name",
        "Pipeline.time_provider",
        "Pipeline.telemetry",
        "Pipeline.strategies[0]",
    ]


class Passthrough:
    """A custom strategy through the public protocol."""

    def execute(self, callback: Any, context: ResilienceContext) -> Any:
        return callback(context)

    async def execute_async(self, callback: Any, context: ResilienceContext) -> Any:
        return await callback(context)


async def test_pipeline_misuse_and_settle() -> None:
    """Sync/async misuse raises ValidationError; settle returns outcomes."""
    for pipeline in (PipelineBuilder().build(), PipelineBuilder().add(Passthrough()).build()):

        async def coro() -> int:
            return 1

        with pytest.raises(ValidationError, match="execute_async"):
            pipeline.execute(coro)
        with pytest.raises(ValidationError, match="not an awaitable"):
            await pipeline.execute_async(lambda: 1)  # type: ignore[arg-type,return-value]
        assert pipeline.settle(lambda: 2) == Ok(2)
        assert isinstance(pipeline.settle(lambda: 1 / 0).error, ZeroDivisionError)
        assert await pipeline.settle_async(coro) == Ok(1)

        async def boom() -> None:
            raise KeyError

        assert isinstance((await pipeline.settle_async(boom)).error, KeyError)
        assert pipeline.execute(lambda: [1]) == [1]
        assert pipeline.execute(lambda: object) is object
    assert "Passthrough" in repr(pipeline)


async def test_decorator_sync_async_partial_and_generators() -> None:
    """The decorator keeps metadata, handles partials and async __call__, refuses generators."""
    pipeline = PipelineBuilder().add(Passthrough()).build()

    @pipeline
    def add(a: int, b: int = 1) -> int:
        """Add."""
        return a + b

    @pipeline
    async def aadd(a: int) -> int:
        return a + 1

    class AsyncCallable:
        async def __call__(self) -> str:
            return "called"

    assert add(1, b=2) == 3
    assert add.__doc__ == "Add."
    assert await aadd(1) == 2
    assert await pipeline(functools.partial(aadd, 2))() == 3
    assert await pipeline(AsyncCallable())() == "called"

    def gen() -> Any:
        yield 1

    with pytest.raises(ValidationError, match="generator"):
        pipeline(gen)


async def test_pipeline_events_with_listener_and_logging(caplog: pytest.LogCaptureFixture) -> None:
    """PipelineExecuting/Executed reach listeners and logs; a severity provider can suppress."""
    events: list[TelemetryEvent] = []

    def boom(event: TelemetryEvent) -> None:
        raise RuntimeError

    def severity(event: TelemetryEvent) -> Severity:
        if event.name == "PipelineExecuting":
            return Severity.NONE
        if event.name == "PipelineExecuted":
            return Severity.WARNING
        raise LookupError

    telemetry = TelemetryOptions(listeners=[events.append, boom], severity_provider=severity)
    for strategies in ((), (Passthrough(),)):
        builder = PipelineBuilder(name="p", instance_name="i", telemetry=telemetry)
        for strategy in strategies:
            builder.add(strategy)
        pipeline = builder.build()
        with caplog.at_level(logging.DEBUG, logger="resilience"):
            assert pipeline.execute(lambda: 1) == 1
            with pytest.raises(KeyError):
                pipeline.execute(lambda: {}["x"])
            assert await pipeline.execute_async(asyncio.sleep, 0, "r") == "r"

            async def fail() -> None:
                raise KeyError

            with pytest.raises(KeyError):
                await pipeline.execute_async(fail)
    assert {e.name for e in events} == {"PipelineExecuted"}
    assert all(e.severity is Severity.WARNING for e in events)
    assert any("PipelineExecuted" in r.getMessage() for r in caplog.records)
    assert any("result: KeyError" in r.getMessage() for r in caplog.records)

    quiet = PipelineBuilder(telemetry=TelemetryOptions(severity_provider=lambda e: 1 / 0)).build()  # type: ignore[arg-type,return-value]
    with caplog.at_level(logging.INFO, logger="resilience"):
        quiet.execute(lambda: None)
    assert any("severity provider raised" in r.getMessage() for r in caplog.records)
