"""A lock key per call: the operation key, set by `use_context` or `@pipeline(operation_key=...)`."""

from __future__ import annotations

import asyncio
import threading

import pytest

from resilience import (
    LockNotAcquiredError,
    ResilienceContext,
    ResiliencePipeline,
    ResiliencePipelineBuilder,
    ValidationError,
    get_context,
    get_lock_token,
    use_context,
)
from resilience.stores import MemoryLockStore
from resilience.testing import capture_events


def _per_order(store: MemoryLockStore | None = None) -> ResiliencePipeline:
    store = store or MemoryLockStore()
    return (
        ResiliencePipelineBuilder(name="orders").add_lock(lambda ctx: f"order:{ctx.operation_key}", store=store).build()
    )


def _lock_keys(events: list[object]) -> list[str]:
    return [event.arguments.key for event in events if getattr(event, "name", "") == "OnLockAcquired"]  # type: ignore[attr-defined]


def test_the_decorator_takes_each_calls_operation_key_from_the_named_argument() -> None:
    """`@pipeline(operation_key="order_id")`: the call's `order_id`, by position or keyword."""
    pipeline = _per_order()

    @pipeline(operation_key="order_id")
    def charge(order_id: str, amount: int) -> str:
        context = get_context()
        assert context is not None
        return f"{context.operation_key}:{amount}:{get_lock_token() is not None}"

    with capture_events() as events:
        assert charge("41", 5) == "41:5:True"
        assert charge("42", amount=7) == "42:7:True"
    assert _lock_keys(events) == ["order:41", "order:42"]
    assert charge.__name__ == "charge"


def test_use_context_gives_execute_the_same_per_call_key() -> None:
    """Around `execute` (which reserves no argument), `use_context(operation_key=...)` does the same."""
    pipeline = _per_order()
    with capture_events() as events:
        for order_id in ("41", "42"):
            with use_context(operation_key=order_id):
                pipeline.execute(lambda: None)
    assert _lock_keys(events) == ["order:41", "order:42"]


def test_different_keys_run_in_parallel_and_the_same_key_excludes() -> None:
    """One lease per order: order 42 runs while 41 is held; a second 41 is rejected."""
    pipeline = _per_order()
    holding, release = threading.Event(), threading.Event()

    @pipeline(operation_key=lambda order_id: order_id)
    def charge(order_id: str) -> str:
        if order_id == "41":
            holding.set()
            release.wait(5)
        return order_id

    holder = threading.Thread(target=charge, args=("41",))
    holder.start()
    try:
        assert holding.wait(5)
        assert charge("42") == "42"
        with pytest.raises(LockNotAcquiredError) as rejected:
            charge("41")
        assert rejected.value.key == "order:41"
    finally:
        release.set()
        holder.join(5)


async def test_the_async_decorator_derives_the_key_too() -> None:
    """The same keyword on an async function; the key function stays sync."""
    pipeline = _per_order()

    @pipeline(operation_key=lambda order_id: order_id)
    async def charge(order_id: str) -> str:
        await asyncio.sleep(0)
        context = get_context()
        assert context is not None
        assert context.operation_key is not None
        return context.operation_key

    with capture_events() as events:
        assert await charge("7") == "7"
    assert _lock_keys(events) == ["order:7"]


def test_the_keyed_call_derives_from_the_ambient_context() -> None:
    """Properties and the caller's signal still reach the call; only the operation key changes."""
    pipeline = _per_order()
    seen: list[ResilienceContext | None] = []

    @pipeline(operation_key=lambda order_id: order_id)
    def charge(order_id: str) -> None:
        seen.append(get_context())

    outer = ResilienceContext(operation_key="batch")
    with use_context(outer):
        charge("9")
    assert seen[0] is not None
    assert seen[0].operation_key == "9"
    outer.signal.abort()
    with use_context(outer), pytest.raises(Exception, match="aborted"):
        charge("10")


@pytest.mark.parametrize("bad", [None, "", 42])
def test_a_key_function_that_returns_no_string_is_a_validation_error(bad: object) -> None:
    """The operation key function must return a non-empty str; the call does not run."""
    pipeline = _per_order()
    ran: list[int] = []

    @pipeline(operation_key=lambda _: bad)  # type: ignore[arg-type, return-value]
    def charge(order_id: str) -> None:
        ran.append(1)

    with pytest.raises(ValidationError, match="operation_key"):
        charge("1")
    assert ran == []


def test_the_decorator_refuses_a_non_callable_key_and_both_forms_at_once() -> None:
    """`operation_key` must be a callable; a function and the keyword together are refused."""
    pipeline = _per_order()
    with pytest.raises(ValidationError, match="operation_key: must be a parameter name or a function"):
        pipeline(operation_key=3)  # type: ignore[call-overload]
    with pytest.raises(ValidationError, match="operation_key: must be a parameter name or a function"):
        pipeline(operation_key="")
    with pytest.raises(ValidationError, match="not both"):
        pipeline(lambda: None, operation_key=lambda: "k")  # type: ignore[call-overload]
    with pytest.raises(ValidationError, match="must be a callable"):
        pipeline(operation_key=lambda: "k")(None)  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match="must be a callable"):
        pipeline(operation_key="order_id")(None)  # type: ignore[arg-type]


def test_a_key_built_from_a_missing_operation_key_is_refused_before_locking() -> None:
    """The wrong pattern — a key function reading an operation key nobody set — fails clearly."""
    store = MemoryLockStore()
    pipeline = _per_order(store)
    ran: list[int] = []
    with pytest.raises(ValidationError) as caught:
        pipeline.execute(lambda: ran.append(1))
    message = str(caught.value)
    assert "'order:None'" in message
    assert "use_context(operation_key=" in message
    assert "@pipeline(operation_key=" in message
    assert ran == []
    assert store.acquire("order:None", "probe", 1) is not None  # nothing was locked


def test_a_key_with_none_in_it_is_fine_when_an_operation_key_is_set() -> None:
    """Only a missing operation key makes 'None' suspicious: a real key may contain the word."""
    pipeline = _per_order()
    with use_context(operation_key="None-of-your-business"):
        assert pipeline.execute(lambda: "ok") == "ok"
    fixed = ResiliencePipelineBuilder().add_lock(lambda ctx: "nightly").build()
    assert fixed.execute(lambda: "ok") == "ok"  # a key function that ignores the context


def test_a_zero_argument_key_function_is_refused_at_build() -> None:
    """`add_lock(lambda: "nightly")` would fail at run time: `build()` says what to write instead."""
    with pytest.raises(ValidationError) as caught:
        ResiliencePipelineBuilder().add_lock(lambda: "nightly").build()  # type: ignore[arg-type,misc]
    (problem,) = caught.value.problems
    assert problem.startswith("Lock.key: the key function takes no argument")
    assert "add_lock('nightly')" in problem


def test_a_key_function_with_two_required_arguments_is_refused_at_build() -> None:
    """A key function is called with exactly the context."""
    with pytest.raises(ValidationError, match=r"Lock.key: the key function must take exactly one argument"):
        ResiliencePipelineBuilder().add_lock(lambda ctx, other: "k").build()  # type: ignore[arg-type,misc]


def test_key_functions_of_other_shapes_are_accepted() -> None:
    """Defaults, *args, bound methods and builtins without a signature all take the context."""

    class Keys:
        def of(self, ctx: ResilienceContext) -> str:
            return f"k:{ctx.operation_key}"

    for key in (lambda ctx, suffix="x": f"k{suffix}", lambda *args: "k", Keys().of, str):
        pipeline = ResiliencePipelineBuilder().add_lock(key).build()  # type: ignore[arg-type]
        with use_context(operation_key="1"):
            assert pipeline.execute(lambda: "ok") == "ok"


def test_a_key_function_of_several_arguments_composes_the_key() -> None:
    """A function taking the decorated function's parameters builds a composite key."""
    pipeline = _per_order()

    @pipeline(operation_key=lambda tenant, order_id: f"{tenant}/{order_id}")
    def charge(tenant: str, order_id: int) -> None:
        pass

    with capture_events() as events:
        charge("acme", 42)
    assert _lock_keys(events) == ["order:acme/42"]


def test_the_named_argument_is_found_wherever_the_caller_put_it() -> None:
    """Position, keyword, default, keyword-only, a method's parameter: all work; ints become text."""
    pipeline = _per_order()
    seen: list[str | None] = []

    def current() -> None:
        context = get_context()
        seen.append(None if context is None else context.operation_key)

    @pipeline(operation_key="order_id")
    def by_default(amount: int, order_id: int = 7) -> None:
        current()

    @pipeline(operation_key="order_id")
    def keyword_only(*, order_id: str) -> None:
        current()

    @pipeline(operation_key="order_id")
    def positional_only(order_id: str, /) -> None:
        current()

    class Orders:
        @pipeline(operation_key="order_id")
        def charge(self, order_id: int) -> None:
            current()

    by_default(1)
    by_default(1, 8)
    by_default(1, order_id=9)
    keyword_only(order_id="k")
    positional_only("p")
    Orders().charge(11)
    assert seen == ["7", "8", "9", "k", "p", "11"]


def test_a_missing_parameter_or_a_none_argument_is_a_validation_error() -> None:
    """No such parameter: refused at decoration; a None argument: refused at the call."""
    pipeline = _per_order()
    with pytest.raises(ValidationError, match="has no parameter named 'order'"):

        @pipeline(operation_key="order")
        def charge(order_id: str) -> None:
            pass

    with pytest.raises(ValidationError, match="has no parameter named 'rest'"):

        @pipeline(operation_key="rest")
        def spread(*rest: str) -> None:
            pass

    @pipeline(operation_key="order_id")
    def maybe(order_id: str | None) -> None:
        pass

    with pytest.raises(ValidationError, match=r"the argument 'order_id' of .*maybe is None"):
        maybe(None)
    with pytest.raises(TypeError, match="missing a required argument"):
        maybe()  # type: ignore[call-arg]
