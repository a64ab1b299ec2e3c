"""A Ctrl-C (or `sys.exit()`) that lands in a callback the library runs is never swallowed.

Python raises `KeyboardInterrupt` on the main thread wherever it happens to be. When that is
a user callback the library runs on the caller's thread (a signal's callbacks on the aborting
thread, a loss's callbacks as a lease ends), the library must let it through once its own
state is consistent, as asyncio does with its callbacks; on a background thread there is
nobody to raise it to, so it is logged there and the thread lives on.
"""

from __future__ import annotations

import os
import signal as os_signal
import subprocess
import sys
import textwrap
import threading
import uuid
from typing import TYPE_CHECKING

import pytest

from resilience import LockLostError
from resilience._lease._workers import CALLBACKS, Strand
from resilience._signal import Signal
from resilience.primitives import lock
from resilience.stores import MemoryLockStore

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from resilience.primitives import LockHandle

pytestmark = pytest.mark.skipif(
    threading.current_thread() is not threading.main_thread(), reason="interrupts reach the main thread only"
)


@pytest.fixture
def default_sigint() -> Iterator[None]:
    """Python's own Ctrl-C handler (a test runner may have replaced it), restored afterwards."""
    previous = os_signal.signal(os_signal.SIGINT, os_signal.default_int_handler)
    try:
        yield
    finally:
        os_signal.signal(os_signal.SIGINT, previous)


def _interrupt(*_args: object) -> None:
    raise KeyboardInterrupt


def _callbacks(calls: list[str]) -> tuple[Callable[[BaseException], None], ...]:
    return (lambda _reason: calls.append("before"), _interrupt, lambda _reason: calls.append("after"))


@pytest.mark.parametrize("how", ["abort", "deferred"])
def test_a_signal_callback_interrupted_on_the_main_thread_propagates_after_the_others(how: str) -> None:
    calls: list[str] = []
    signal = Signal()
    for callback in _callbacks(calls):
        signal.add_callback(callback)
    if how == "abort":
        with pytest.raises(KeyboardInterrupt):
            signal.abort()
    else:
        run = signal.abort_deferred(RuntimeError("lost"))
        assert run is not None
        with pytest.raises(KeyboardInterrupt):
            run()
    assert signal.aborted
    assert calls == ["before", "after"]


def test_a_signal_callback_interrupted_on_another_thread_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    calls: list[str] = []
    signal = Signal()
    for callback in _callbacks(calls):
        signal.add_callback(callback)
    aborting = threading.Thread(target=signal.abort)
    aborting.start()
    aborting.join(10)
    assert calls == ["before", "after"]
    assert "a signal callback raised" in caplog.text


def test_a_strand_interrupted_in_join_runs_its_other_jobs_and_is_not_left_stuck() -> None:
    strand = Strand(CALLBACKS)
    ran = threading.Event()
    blocker = threading.Event()
    # Keep the pool's run of the strand from starting before `join` takes it: the first job
    # is queued while the strand is active elsewhere (here: this thread, by hand).
    with strand._lock:
        strand._active = True
    strand.submit(_interrupt)
    strand.submit(ran.set)
    with strand._lock:
        strand._active = False
    with pytest.raises(KeyboardInterrupt):
        strand.join()
    assert ran.wait(10), "the job after the interrupted one never ran"
    strand.submit(blocker.set)
    strand.join()  # returns: the strand is not left active without a runner
    assert blocker.wait(10)


def test_a_real_ctrl_c_in_a_loss_callback_on_the_holders_thread_reaches_the_caller(default_sigint: None) -> None:
    """The loss is found by the holder's own `extend()`: its callbacks run on this thread, where the Ctrl-C lands."""

    class LosingStore(MemoryLockStore):
        def renew(self, key: str, owner: str, ttl: float) -> bool:
            return False

    store = LosingStore()
    key = f"k-{uuid.uuid4().hex}"
    told: list[BaseException] = []

    def press_ctrl_c(reason: BaseException) -> None:
        told.append(reason)
        os.kill(os.getpid(), os_signal.SIGINT)  # Python raises it here, at the next instruction
        threading.Event().wait(5)  # the interrupt ends this wait at once

    def body(handle: LockHandle) -> None:
        handle.signal.add_callback(press_ctrl_c)
        handle.extend()

    with pytest.raises(KeyboardInterrupt):
        lock(store).run(key, body)
    assert len(told) == 1
    assert isinstance(told[0], LockLostError)
    assert store.acquire(key, "next", 5.0) is not None, "the interrupted holder left the key locked"


def test_a_ctrl_c_in_an_async_loss_callback_ends_the_loops_run() -> None:
    """Under asyncio on the main thread, `on_lock_lost` raising KeyboardInterrupt ends `asyncio.run` (in a process of its own)."""
    script = textwrap.dedent(
        """
        import asyncio
        from resilience import ResiliencePipelineBuilder
        from resilience.stores import MemoryLockStore

        class LosingStore(MemoryLockStore):
            def renew(self, key, owner, ttl):
                return False

        def interrupt(_arguments):
            raise KeyboardInterrupt

        pipeline = (
            ResiliencePipelineBuilder()
            .add_lock("k", ttl=0.3, store=LosingStore(), on_lock_lost=interrupt)
            .build()
        )

        async def body():
            await asyncio.sleep(5)  # outlives the lease: the loss is told while it runs

        try:
            asyncio.run(pipeline.execute_async(body))
        except KeyboardInterrupt:
            print("interrupted")
        else:
            print("not interrupted")
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False)
    assert done.stdout.strip() == "interrupted", done.stderr
