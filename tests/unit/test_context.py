import asyncio
import gc
import pickle
import threading
import weakref
from concurrent.futures import ThreadPoolExecutor

import pytest

from resilience import (
    LOCK_TOKEN,
    PipelineBuilder,
    ResilienceContext,
    ResilienceProperties,
    ResiliencePropertyKey,
    Signal,
    get_context,
    get_lock_token,
    use_context,
)

USER = ResiliencePropertyKey[str]("user")
COUNT = ResiliencePropertyKey[int]("count")


def test_property_keys_compare_by_name_and_are_frozen() -> None:
    """Keys are equal and hash alike by name, immutable, and pickle."""
    assert ResiliencePropertyKey("a") == ResiliencePropertyKey("a")
    assert hash(ResiliencePropertyKey("a")) == hash(ResiliencePropertyKey("a"))
    assert ResiliencePropertyKey("a") != ResiliencePropertyKey("b")
    assert ResiliencePropertyKey("a") != "a"
    assert ResiliencePropertyKey("a").name == "a"
    with pytest.raises(AttributeError):
        ResiliencePropertyKey("a").other = 1  # type: ignore[attr-defined]
    assert pickle.loads(pickle.dumps(USER)) == USER
    assert repr(USER) == "ResiliencePropertyKey('user')"


def test_a_name_has_one_key_object_while_any_is_referenced() -> None:
    """Equal by name is the same object (threads naming a new key at once too); unreferenced, it is freed."""
    barrier = threading.Barrier(8)

    def name_it(_: int) -> ResiliencePropertyKey[int]:
        barrier.wait(10)
        return ResiliencePropertyKey[int]("named-at-once")

    with ThreadPoolExecutor(8) as pool:
        keys = list(pool.map(name_it, range(8)))
    assert all(key is keys[0] for key in keys)
    assert pickle.loads(pickle.dumps(keys[0])) is keys[0]
    assert ResiliencePropertyKey("named-at-once") is keys[0]
    gone = weakref.ref(ResiliencePropertyKey(f"made-per-request-{id(keys)}"))
    gc.collect()
    assert gone() is None  # a key made per request does not stay in memory


def test_properties_get_set_contains() -> None:
    """get/[]/set/in behave like a typed mapping."""
    props = ResilienceProperties({USER: "ann"})
    assert props.get(USER) == "ann"
    assert props[USER] == "ann"
    assert props.get(COUNT) is None
    assert props.get(COUNT, 0) == 0
    assert USER in props
    assert COUNT not in props
    assert "user" not in props
    with pytest.raises(KeyError):
        props[COUNT]
    props.set(COUNT, 2)
    assert props[COUNT] == 2
    assert dict(props.to_dict()) == {USER: "ann", COUNT: 2}
    assert len(props) == 2
    assert set(props) == {USER, COUNT}
    assert "ann" in repr(props)


def test_child_properties_are_copy_on_write() -> None:
    """A child sees its parent's values; its own writes never reach the parent."""
    parent = ResilienceProperties({USER: "ann", COUNT: 1})
    child = parent.child()
    child.set(COUNT, 5)
    assert child[COUNT] == 5
    assert child[USER] == "ann"
    assert parent[COUNT] == 1
    assert child.to_dict() == {USER: "ann", COUNT: 5}


def test_context_fields_and_defaults() -> None:
    """A context carries key, properties, a signal (made on demand) and attempt 0."""
    signal = Signal()
    context = ResilienceContext(operation_key="op", properties={USER: "bo"}, signal=signal)
    assert context.operation_key == "op"
    assert context.properties[USER] == "bo"
    assert context.signal is signal
    assert context.attempt == 0
    bare = ResilienceContext()
    assert bare.signal is bare.signal
    assert bare.properties is bare.properties
    assert "operation_key=None" in repr(bare)
    shared = ResilienceProperties({USER: "x"})
    assert ResilienceContext(properties=shared).properties is shared


def test_derive_never_mutates_the_parent() -> None:
    """derive() keeps the key, layers properties, and takes its own signal and attempt."""
    parent = ResilienceContext(operation_key="op", properties={USER: "ann"})
    child_signal = parent.signal.child()
    child = parent.derive(signal=child_signal, attempt=2)
    child.properties.set(USER, "changed")
    assert child.operation_key == "op"
    assert child.attempt == 2
    assert child.signal is child_signal
    assert child.properties[USER] == "changed"
    assert parent.properties[USER] == "ann"
    assert parent.attempt == 0
    assert parent.derive().signal is parent.signal
    empty = ResilienceContext().derive()
    empty.properties.set(USER, "only here")
    assert USER in empty.properties


def test_get_context_outside_anything_is_none() -> None:
    """Outside executions and use_context there is no context."""
    assert get_context() is None


def test_use_context_builds_and_restores() -> None:
    """use_context sets the ambient context for the block and restores the previous one."""
    with use_context(operation_key="outer") as outer:
        assert get_context() is outer
        with use_context(outer, operation_key="inner", properties={USER: "u"}) as inner:
            assert inner is not outer
            assert inner.operation_key == "inner"
            assert inner.properties[USER] == "u"
            assert USER not in outer.properties
            assert get_context() is inner
        assert get_context() is outer
    assert get_context() is None


def test_use_context_with_a_signal_override() -> None:
    """A signal keyword replaces the context's signal for the block only."""
    base = ResilienceContext(operation_key="k")
    signal = Signal()
    with use_context(base, signal=signal) as derived:
        assert derived.signal is signal
        assert derived.operation_key == "k"
    with use_context(base) as same:
        assert same is base


def test_executions_derive_from_the_ambient_context() -> None:
    """The callable sees a context derived from use_context's, never the same object."""
    pipeline = PipelineBuilder().build()
    with use_context(operation_key="order:1", properties={USER: "ann"}) as outer:

        def body() -> ResilienceContext:
            inner = get_context()
            assert inner is not None
            inner.properties.set(USER, "mutated")
            return inner

        seen = pipeline.execute(body)
    assert seen is not outer
    assert seen.operation_key == "order:1"
    assert outer.properties[USER] == "ann"
    assert get_context() is None


def test_an_outer_abort_reaches_nested_work() -> None:
    """A nested execution shares the outer signal chain, so an outer abort reaches it."""
    pipeline = PipelineBuilder().build()
    root = Signal()
    with use_context(signal=root):

        def inner() -> bool:
            context = get_context()
            assert context is not None
            root.abort()
            return context.signal.aborted

        assert pipeline.execute(lambda: pipeline.execute(inner))


async def test_the_context_follows_asyncio_tasks_and_to_thread() -> None:
    """Tasks and asyncio.to_thread inherit the ambient context; a bare Thread does not."""
    seen: dict[str, object] = {}
    with use_context(operation_key="async") as ctx:
        seen["task"] = await asyncio.create_task(_current())
        seen["to_thread"] = await asyncio.to_thread(get_context)

        def bare() -> None:
            seen["thread"] = get_context()

        thread = threading.Thread(target=bare)
        thread.start()
        thread.join()
    assert seen == {"task": ctx, "to_thread": ctx, "thread": None}


async def _current() -> ResilienceContext | None:
    return get_context()


def test_get_lock_token_reads_the_property() -> None:
    """get_lock_token() reads LOCK_TOKEN from the given or ambient context."""
    assert get_lock_token() is None
    assert get_lock_token(ResilienceContext()) is None
    context = ResilienceContext(properties={LOCK_TOKEN: 41})
    assert get_lock_token(context) == 41
    with use_context(context):
        assert get_lock_token() == 41
        child = context.derive()
        child.properties.set(LOCK_TOKEN, 42)
        assert get_lock_token(child) == 42
        assert get_lock_token() == 41
