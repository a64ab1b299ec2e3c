"""Whatever a caller passes or a callback raises, the runtime lives on (regressions of issue #11).

Each test does what once killed the shared timer or renewer thread for the whole process (or
stopped the loop), then proves with `assert_runtime_healthy` that a normal lease in the same
process is still renewed and watched.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
import uuid
from typing import TYPE_CHECKING, Any

import freezegun
import pytest

from resilience import LockLostError, ResiliencePipelineBuilder, ValidationError, get_context
from resilience._runtime._timers import TIMER_THREAD
from resilience.primitives import lock
from resilience.stores import MemoryLockStore
from resilience.telemetry import TelemetryOptions
from tests.lease.health import assert_async_runtime_healthy, assert_runtime_healthy

if TYPE_CHECKING:
    from collections.abc import Callable

    from resilience.telemetry import TelemetryEvent

pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")

FATAL = [SystemExit, KeyboardInterrupt]


class LosingStore(MemoryLockStore):
    """Every renewal answers False (the lease is gone), or raises `renew_error`."""

    def __init__(self, renew_error: Exception | None = None) -> None:
        super().__init__()
        self.renew_error = renew_error

    def renew(self, key: str, owner: str, ttl: float) -> bool:
        if self.renew_error is not None:
            raise self.renew_error
        return False


def _raiser(exc: type[BaseException]) -> Callable[..., None]:
    def raise_(*_args: object) -> None:
        raise exc

    return raise_


def _wait_for_loss() -> None:
    context = get_context()
    assert context is not None
    assert context.signal.wait(10.0)  # returns at the loss: the bound only fails a lease never lost


# -- huge durations ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "make",
    [
        lambda: ResiliencePipelineBuilder().add_lock("k", ttl=2.8e10).build(),
        lambda: ResiliencePipelineBuilder().add_lock("k", wait=1e10).build(),
        lambda: ResiliencePipelineBuilder().add_lock("k", ttl=9.2e15).build(),
        lambda: ResiliencePipelineBuilder().add_timeout(1e10).build(),
        lambda: lock(MemoryLockStore()).run("k", lambda _h: None, ttl=3.7e10),
        lambda: lock(MemoryLockStore()).acquire("k", retries=1, retry_delay=1e10),
        lambda: lock(MemoryLockStore(), ttl=1e300),
    ],
    ids=["lock-ttl", "lock-wait", "lock-ttl-redis-overflow", "timeout", "run-ttl", "retry-delay", "primitive-ttl"],
)
def test_huge_durations_are_refused_at_validation(make: Callable[[], object]) -> None:
    with pytest.raises(ValidationError, match="at most"):
        make()
    assert_runtime_healthy()


def test_a_held_memory_key_with_a_huge_retry_delay_is_a_validation_error() -> None:
    store = MemoryLockStore()
    locks = lock(store)
    handle = locks.acquire("k")
    assert handle is not None
    with pytest.raises(ValidationError):
        locks.acquire("k", retries=1, retry_delay=1e10)
    assert handle.release()


def test_an_extend_with_a_huge_ttl_is_a_validation_error() -> None:
    locks = lock(MemoryLockStore())
    handle = locks.acquire("k")
    assert handle is not None
    with pytest.raises(ValidationError):
        handle.extend(1e10)
    assert handle.release()
    assert_runtime_healthy()


@pytest.mark.parametrize("delay", [1e10, 1e300, float("inf"), float("nan"), -5.0])
def test_the_timer_thread_survives_any_delay(delay: float) -> None:
    fired = threading.Event()
    far = TIMER_THREAD.call_later(delay, lambda: None)
    TIMER_THREAD.call_later(0.01, fired.set)
    assert fired.wait(2.0)
    far.cancel()
    assert_runtime_healthy()


# -- SystemExit / KeyboardInterrupt in any callback -------------------------------------------


@pytest.mark.parametrize("exc", FATAL)
def test_a_timer_callback_raising_a_fatal_error(exc: type[BaseException]) -> None:
    TIMER_THREAD.call_later(0, _raiser(exc))
    time.sleep(0.05)
    assert_runtime_healthy()


@pytest.mark.parametrize("exc", FATAL)
@pytest.mark.parametrize("kind", ["signal-callback", "on_lock_lost", "listener-on-lost"])
def test_a_loss_callback_raising_a_fatal_error(kind: str, exc: type[BaseException]) -> None:
    options: dict[str, Any] = {}
    listeners: list[Callable[[TelemetryEvent], object]] = []
    if kind == "on_lock_lost":
        options["on_lock_lost"] = _raiser(exc)
    if kind == "listener-on-lost":

        def listener(event: TelemetryEvent) -> None:
            if event.name == "OnLockLost":
                raise exc

        listeners.append(listener)
    pipeline = (
        ResiliencePipelineBuilder(telemetry=TelemetryOptions(listeners=listeners))
        .add_lock(f"k-{uuid.uuid4().hex}", ttl=0.3, store=LosingStore(), **options)
        .build()
    )

    def body() -> None:
        if kind == "signal-callback":
            context = get_context()
            assert context is not None
            context.signal.add_callback(_raiser(exc))
        _wait_for_loss()

    # The loss's callbacks run on the lease's callback strand (logged there) or, for what is left
    # when the body ends, on the caller's thread: there a Ctrl-C or an exit on the main thread
    # is the caller's and propagates (`interrupts_caller`), as a listener's exception does.
    with contextlib.suppress(exc):
        pipeline.execute(body)
    time.sleep(0.05)
    assert_runtime_healthy()


# A renewal is tried at ttl/4 and the lease is lost at ttl: 0.75 s between them, so that a
# starved timer thread on a loaded machine still tries (and fails) a renewal before the loss.
RENEWAL_TTL = 1.0


@pytest.mark.parametrize("exc", FATAL)
@pytest.mark.parametrize("kind", ["on_renew_error", "listener-on-renewal-failed"])
def test_a_renewal_error_callback_raising_a_fatal_error(kind: str, exc: type[BaseException]) -> None:
    store = LosingStore(renew_error=ConnectionError("down"))
    reported = threading.Event()

    def on_renew_error(_error: Exception) -> None:
        reported.set()
        raise exc

    # Told on the lease's callback strand, or on the caller's thread if the strand still has it
    # queued when the holder ends: a Ctrl-C or exit there is the caller's and propagates.
    if kind == "on_renew_error":
        locks = lock(store)
        with contextlib.suppress(exc), pytest.raises(LockLostError):
            locks.run(
                f"k-{uuid.uuid4().hex}", lambda _h: _wait_for_loss(), ttl=RENEWAL_TTL, on_renew_error=on_renew_error
            )
    else:

        def listener(event: TelemetryEvent) -> None:
            if event.name == "OnLockRenewalFailed":
                on_renew_error(ConnectionError())

        pipeline = (
            ResiliencePipelineBuilder(telemetry=TelemetryOptions(listeners=[listener]))
            .add_lock(f"k-{uuid.uuid4().hex}", ttl=RENEWAL_TTL, store=store)
            .build()
        )
        with contextlib.suppress(exc):
            pipeline.execute(_wait_for_loss)
    assert reported.wait(5)  # told on the lease's callback strand, maybe after the execution ended
    time.sleep(0.05)
    assert_runtime_healthy()


@pytest.mark.parametrize("exc", FATAL)
@pytest.mark.parametrize("kind", ["signal-callback", "on_lock_lost"])
def test_an_async_loss_callback_raising_a_fatal_error(kind: str, exc: type[BaseException]) -> None:
    """The loop runs on a thread of its own: there the error is logged and the runtime lives on.

    (On the main thread it ends the loop's run, as asyncio's own callbacks' do:
    `tests/unit/test_interrupts.py`, in a process of its own: after a `SystemExit` left a task
    here, CPython 3.11.7 failed a later `compile()` in the same worker with "AST constructor
    recursion depth mismatch".)
    """
    options: dict[str, Any] = {}
    if kind == "on_lock_lost":
        options["on_lock_lost"] = _raiser(exc)
    pipeline = ResiliencePipelineBuilder().add_lock(f"k-{uuid.uuid4().hex}", ttl=0.3, store=LosingStore(), **options)
    built = pipeline.build()

    async def body() -> None:
        context = get_context()
        assert context is not None
        if kind == "signal-callback":
            context.signal.add_callback(_raiser(exc))
        assert await context.signal.wait_async(3.0)

    async def scenario() -> None:
        await built.execute_async(body)
        await asyncio.sleep(0.05)

    loop_thread = threading.Thread(target=asyncio.run, args=(scenario(),))
    loop_thread.start()
    loop_thread.join(30)
    assert not loop_thread.is_alive()
    asyncio.run(assert_async_runtime_healthy())
    assert_runtime_healthy()


def test_a_timer_scheduled_while_time_is_frozen_fires_on_real_time() -> None:
    """freezegun's fake `time.monotonic` must not put a timer's deadline in the frozen year."""
    fired = threading.Event()
    with freezegun.freeze_time("2030-01-01"):
        TIMER_THREAD.call_later(0.01, fired.set)
    assert fired.wait(2), "a call_later made during a freeze never fired"


# Renewals every 0.4 s: room for a loaded machine (at 0.6 s a lease was lost with two test
# suites sharing two cores), and one falls due in each 0.5 s freeze below.
FROZEN_TTL = 1.2


def _held_throughout(store: MemoryLockStore, key: str, seconds: float) -> Callable[[], bool]:
    """A body that outlives its ttl, then tells whether its lease was kept (renewed, not lost)."""

    def body() -> bool:
        context = get_context()
        assert context is not None
        time.sleep(seconds)
        expires_in = store._leases[key][2] - time.monotonic()  # on the real clock, renewed lately
        return (
            0 < expires_in <= FROZEN_TTL and not context.signal.aborted and store.acquire(key, "another", 5.0) is None
        )

    return body


def test_a_lease_held_across_a_frozen_clock_is_renewed_and_leaves_the_runtime_healthy() -> None:
    """A sync lease whose renewals fall due while freezegun freezes the clock.

    Leases run on the real clock (`lease_clock`): the freeze neither loses this lease nor
    leaves the scheduler asleep. Before, the scheduler re-armed itself with the frozen clock
    (a deadline in 2030) and every later sync lease of the process went unrenewed and
    unwatched (the unexplained Cluster-fault failure of issue #11); and the renewal during the
    freeze, read on the frozen clock, declared this lease lost.
    """
    store = MemoryLockStore()
    key = f"k-{uuid.uuid4().hex}"
    pipeline = ResiliencePipelineBuilder().add_lock(key, ttl=FROZEN_TTL, store=store).build()
    kept: list[bool] = []
    holder = threading.Thread(
        target=lambda: kept.append(pipeline.execute(_held_throughout(store, key, 2 * FROZEN_TTL)))
    )
    holder.start()
    time.sleep(0.05)
    with freezegun.freeze_time("2030-01-01"):
        time.sleep(0.5)  # at least one renewal falls due while the clock is frozen
    holder.join(5)
    assert kept == [True]
    assert_runtime_healthy()


def test_a_lease_taken_while_the_clock_is_frozen_is_renewed_after_the_freeze() -> None:
    """At a freeze's end the patched monotonic clock goes back by years; the lease's does not."""
    store = MemoryLockStore()
    key = f"k-{uuid.uuid4().hex}"
    pipeline = ResiliencePipelineBuilder().add_lock(key, ttl=FROZEN_TTL, store=store).build()
    kept: list[bool] = []
    with freezegun.freeze_time("2030-01-01"):
        holder = threading.Thread(
            target=lambda: kept.append(pipeline.execute(_held_throughout(store, key, 2 * FROZEN_TTL)))
        )
        holder.start()
        time.sleep(0.1)
    holder.join(5)
    assert kept == [True]
    assert_runtime_healthy()


async def test_an_async_lease_across_a_frozen_clock_leaves_later_async_leases_renewed() -> None:
    """The async twin: a freeze moves the loop's clock too, so lease timers must not live there.

    Before, the lease's renewal re-armed during a short freeze put the loop's scheduler timer
    in the frozen year while the scheduler believed itself armed: a later lease on the same
    loop, with no freeze any more, was not renewed and another owner took its key untold.
    """
    store = MemoryLockStore()

    def pipeline(key: str) -> Any:
        return ResiliencePipelineBuilder().add_lock(key, ttl=FROZEN_TTL, store=store).build()

    async def across_the_freeze() -> None:
        await asyncio.to_thread(time.sleep, 0.6)  # a blocking wait: the freeze starts and ends meanwhile

    first = asyncio.ensure_future(pipeline(f"k-{uuid.uuid4().hex}").execute_async(across_the_freeze))
    await asyncio.sleep(0.02)
    freezer = freezegun.freeze_time("2030-01-01")
    freezer.start()
    try:
        await asyncio.to_thread(time.sleep, 0.5)
    finally:
        freezer.stop()
    await first
    key = f"k-{uuid.uuid4().hex}"

    async def later() -> tuple[int | None, bool]:
        context = get_context()
        assert context is not None
        await asyncio.sleep(2 * FROZEN_TTL)  # past its ttl: only renewals keep it
        return store.acquire(key, "another", 5.0), context.signal.aborted

    assert await pipeline(key).execute_async(later) == (None, False)
    await assert_async_runtime_healthy()
