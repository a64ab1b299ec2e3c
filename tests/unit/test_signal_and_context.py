"""The signal and context behaviour the lock strategy builds on (DESIGN §2.3)."""

from __future__ import annotations

import asyncio
import logging
import pickle
import threading

import pytest

from resilience import (
    LOCK_TOKEN,
    OperationAbortedError,
    ResilienceContext,
    ResiliencePropertyKey,
    Signal,
    get_context,
    use_context,
)

KEY: ResiliencePropertyKey[str] = ResiliencePropertyKey("k")


class TestSignal:
    def test_abort_once_with_a_default_reason(self) -> None:
        """The first abort wins; the default reason is OperationAbortedError."""
        signal = Signal()
        assert signal.abort() is True
        first = signal.reason
        assert isinstance(first, OperationAbortedError)
        assert signal.abort(ValueError()) is False
        assert signal.reason is first
        with pytest.raises(OperationAbortedError):
            signal.raise_if_aborted()
        assert "aborted" in repr(signal)
        assert "active" in repr(Signal())

    def test_children_follow_and_can_detach(self) -> None:
        """A child aborts with its parent's reason, unless detached; a child of an aborted parent is born aborted."""
        parent = Signal()
        child = parent.child()
        detached = parent.child()
        detached.detach()
        reason = ValueError("x")
        parent.abort(reason)
        assert child.reason is reason
        assert not detached.aborted
        assert parent.child().reason is reason

    def test_callbacks_run_once_and_their_errors_are_logged(self, caplog: pytest.LogCaptureFixture) -> None:
        """Callbacks run once on abort (or at once if already aborted); exceptions are logged."""
        signal = Signal()
        seen: list[BaseException] = []

        def boom(_reason: BaseException) -> None:
            raise RuntimeError("cb")

        remove = signal.add_callback(seen.append)
        signal.add_callback(boom)
        removed = signal.add_callback(lambda _r: seen.append(KeyError()))
        removed_twice = signal.add_callback(seen.append)
        removed()
        removed_twice()
        with caplog.at_level(logging.ERROR, logger="resilience"):
            signal.abort()
            signal.add_callback(seen.append)()
            signal.add_callback(boom)
        remove()
        assert len(seen) == 2
        assert caplog.text.count("a signal callback raised") == 2

    def test_wait_blocks_until_abort_or_timeout(self) -> None:
        """wait() returns True on abort (from another thread) and False on timeout."""
        signal = Signal()
        assert signal.wait(0.001) is False
        threading.Timer(0.01, signal.abort).start()
        assert signal.wait(5) is True
        assert signal.wait() is True

    async def test_wait_async(self) -> None:
        """wait_async() resolves on abort, times out, and returns at once when aborted."""
        signal = Signal()
        assert await signal.wait_async(0.001) is False
        asyncio.get_running_loop().call_later(0.01, signal.abort)
        assert await signal.wait_async(5) is True
        assert await signal.wait_async() is True
        other = Signal()
        threading.Timer(0.01, other.abort).start()
        assert await other.wait_async() is True

    async def test_cancel_scope_turns_the_abort_into_its_reason(self) -> None:
        """A block cancelled by the signal raises the signal's reason."""
        signal = Signal()
        reason = ValueError("stop")
        asyncio.get_running_loop().call_later(0.01, signal.abort, reason)
        with pytest.raises(ValueError) as caught:
            async with signal.cancel_scope():
                await asyncio.sleep(10)
        assert caught.value is reason

    async def test_cancel_scope_from_another_thread(self) -> None:
        """An abort on another thread cancels the task through its loop."""
        signal = Signal()
        threading.Timer(0.01, signal.abort).start()
        with pytest.raises(OperationAbortedError):
            async with signal.cancel_scope():
                await asyncio.sleep(10)

    async def test_cancel_scope_lets_other_cancellations_through(self) -> None:
        """The caller's own cancellation passes through unchanged."""
        signal = Signal()

        async def body() -> None:
            async with signal.cancel_scope():
                await asyncio.sleep(10)

        task = asyncio.ensure_future(body())
        await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    async def test_a_block_that_returns_after_the_abort_returns(self) -> None:
        """Aborted inside the block's last step: the block's result stands."""
        signal = Signal()
        async with signal.cancel_scope():
            signal.abort()
        assert signal.aborted

    async def test_an_aborted_signal_refuses_the_scope(self) -> None:
        """Entering a scope on an aborted signal raises its reason at once."""
        signal = Signal()
        signal.abort(KeyError("k"))
        with pytest.raises(KeyError):
            async with signal.cancel_scope():
                raise AssertionError


class TestContext:
    def test_properties_read_through_and_write_locally(self) -> None:
        """A derived context sees its parent's properties; its writes stay its own."""
        parent = ResilienceContext(operation_key="op", properties={KEY: "a"})
        child = parent.derive(attempt=2)
        child.properties.set(LOCK_TOKEN, 7)
        assert child.properties[KEY] == "a"
        assert child.properties.get(LOCK_TOKEN) == 7
        assert LOCK_TOKEN not in parent.properties
        assert KEY in child.properties
        assert child.properties.to_dict() == {KEY: "a", LOCK_TOKEN: 7}
        assert set(child.properties) == {KEY, LOCK_TOKEN}
        assert len(child.properties) == 2
        assert child.properties.get(ResiliencePropertyKey("missing"), "d") == "d"
        with pytest.raises(KeyError):
            _ = child.properties[ResiliencePropertyKey("missing")]
        assert (child.operation_key, child.attempt, parent.attempt) == ("op", 2, 0)
        assert "op" in repr(child)
        assert repr(child.properties).startswith("ResilienceProperties(")
        assert child.properties.child().get(KEY) == "a"

    def test_property_keys_are_frozen_hashable_and_pickle(self) -> None:
        """Keys compare and hash by name, refuse mutation and survive pickle."""
        key = ResiliencePropertyKey[int]("n")
        assert key == ResiliencePropertyKey("n")
        assert key != "n"
        assert hash(key) == hash(ResiliencePropertyKey("n"))
        assert pickle.loads(pickle.dumps(key)) == key
        assert key.name == "n"
        assert repr(key) == "ResiliencePropertyKey('n')"
        with pytest.raises(AttributeError):
            key.x = 1  # type: ignore[attr-defined]

    def test_use_context_sets_and_overrides_the_ambient_context(self) -> None:
        """use_context builds or derives a context and makes it ambient for the block."""
        signal = Signal()
        with use_context(operation_key="a", properties={KEY: "v"}) as outer:
            assert get_context() is outer
            with use_context(outer, operation_key="b", properties={KEY: "w"}, signal=signal) as inner:
                assert inner.operation_key == "b"
                assert inner.properties[KEY] == "w"
                assert inner.signal is signal
                assert outer.properties[KEY] == "v"
        assert get_context() is None
