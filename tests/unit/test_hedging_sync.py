"""The hedging strategy, sync: attempt 0 on the caller's thread, hedged attempts on the shared pool.

The fake clock is advanced from inside attempt 0 (the caller's thread is busy running it), and
slow attempts wait on their own signal, as a cooperative sync callable does.
"""

from __future__ import annotations

import contextvars
import math
import threading
from typing import TYPE_CHECKING, Any

import pytest

from resilience import (
    Err,
    Ok,
    OperationAbortedError,
    ResilienceContext,
    ResiliencePipeline,
    ResiliencePipelineBuilder,
    Signal,
    TimeoutRejectedError,
    get_context,
    get_lock_token,
    use_context,
)
from resilience._runtime._pool import Pool
from resilience.strategies import HedgingActionArguments, HedgingDelayArguments, OnHedgingArguments
from resilience.strategies.hedging import _strategy as hedging_module
from resilience.strategies.hedging._pool import POOL_SIZE
from resilience.telemetry import Severity, TelemetryEvent, TelemetryOptions

if TYPE_CHECKING:
    from collections.abc import Callable

    from resilience.testing import FakeTimeProvider

REAL_WAIT = 10.0  # an upper bound on real waits: reached only if the code under test is wrong


class Replicas:
    """A sync callable whose behaviour depends on its attempt.

    `plan[n]` is "slow" (wait for the attempt's signal, then raise its reason), a value, an
    exception, or a callable taking the context. `advance` moves the clock from attempt 0.
    """

    def __init__(
        self,
        clock: FakeTimeProvider,
        plan: dict[int, object],
        *,
        advance: float = 0.0,
        barrier: threading.Barrier | None = None,
    ) -> None:
        self.barrier = barrier
        self.clock = clock
        self.plan = plan
        self.advance = advance
        self.started: list[int] = []
        self.ended: dict[int, str] = {}
        self.threads: dict[int, int] = {}
        self.contexts: dict[int, ResilienceContext] = {}
        self.lock = threading.Lock()

    def __call__(self, *args: object) -> object:
        context = get_context()
        assert context is not None
        attempt = context.attempt
        with self.lock:
            self.started.append(attempt)
            self.threads[attempt] = threading.get_ident()
            self.contexts[attempt] = context
        if attempt == 0 and self.advance:
            self.clock.advance(self.advance)
        if self.barrier is not None:  # every attempt has started before any goes on
            self.barrier.wait(REAL_WAIT)
        effect = self.plan.get(attempt, "slow")
        try:
            if effect == "slow":
                assert context.signal.wait(REAL_WAIT), "the slow attempt was never aborted"
                context.signal.raise_if_aborted()
            if callable(effect):
                effect = effect(context)
            if isinstance(effect, BaseException):
                raise effect
        except BaseException as exc:
            self.ended[attempt] = f"raised {type(exc).__name__}"
            raise
        self.ended[attempt] = "returned"
        return effect


def build(clock: FakeTimeProvider, events: list[TelemetryEvent] | None = None, **options: Any) -> ResiliencePipeline:
    telemetry = TelemetryOptions(listeners=[events.append]) if events is not None else None
    return ResiliencePipelineBuilder(time_provider=clock, telemetry=telemetry).add_hedging(**options).build()


def test_the_first_attempt_wins_before_the_delay_on_the_callers_thread(clock: FakeTimeProvider) -> None:
    """The success path: one attempt, on the caller's thread, no timer left behind."""
    replicas = Replicas(clock, {0: "primary"})
    assert build(clock, delay=1).execute(replicas) == "primary"
    assert replicas.started == [0]
    assert replicas.threads[0] == threading.get_ident()
    assert clock.pending_timers == 0


def test_a_slow_attempt_is_hedged_on_the_pool_and_aborted_when_it_loses(clock: FakeTimeProvider) -> None:
    """After `delay` attempt 1 runs on a pool thread; it wins; attempt 0 sees its signal abort."""
    events: list[TelemetryEvent] = []
    replicas = Replicas(clock, {1: "hedge"}, advance=2)
    assert build(clock, events, delay=2).execute(replicas) == "hedge"
    assert replicas.started == [0, 1]
    assert replicas.threads[1] != threading.get_ident()
    assert replicas.ended == {1: "returned", 0: "raised OperationAbortedError"}
    assert isinstance(replicas.contexts[0].signal.reason, OperationAbortedError)
    [hedging] = [e for e in events if e.name == "OnHedging"]
    assert hedging.arguments == OnHedgingArguments(replicas.contexts[1], 1, 2.0)
    severities = [(e.arguments.attempt, e.severity) for e in events if e.name == "ExecutionAttempt"]  # type: ignore[union-attr]
    assert sorted(severities) == [(0, Severity.INFORMATION), (1, Severity.INFORMATION)]


def test_the_execution_waits_for_a_loser_that_ignores_its_signal(clock: FakeTimeProvider) -> None:
    """Cooperative cancellation: a loser still running is waited for; its result is dropped."""
    release = threading.Event()
    won = threading.Event()
    hedge_started = threading.Event()
    results: list[object] = []

    def stubborn(_context: ResilienceContext) -> str:
        hedge_started.set()
        assert release.wait(REAL_WAIT)
        return "late"

    def original(_context: ResilienceContext) -> str:
        assert hedge_started.wait(REAL_WAIT)
        return "original"

    def listener(event: TelemetryEvent) -> None:
        if event.name == "ExecutionAttempt" and event.arguments.attempt == 0:  # type: ignore[union-attr]
            won.set()

    replicas = Replicas(clock, {0: original, 1: stubborn}, advance=1)
    pipeline = (
        ResiliencePipelineBuilder(time_provider=clock, telemetry=TelemetryOptions(listeners=[listener]))
        .add_hedging(delay=1)
        .build()
    )
    caller = threading.Thread(target=lambda: results.append(pipeline.execute(replicas)))
    caller.start()
    assert won.wait(REAL_WAIT)
    caller.join(0.2)
    assert caller.is_alive(), "the execution returned while a hedged attempt still ran"
    release.set()
    caller.join(REAL_WAIT)
    assert results == ["original"]
    assert replicas.ended == {0: "returned", 1: "returned"}


def test_a_handled_failure_hedges_at_once_on_the_callers_thread(clock: FakeTimeProvider) -> None:
    """Fallback mode (`delay=math.inf`): no pool thread, the next attempt after a handled failure."""
    replicas = Replicas(clock, {0: ConnectionError(), 1: ConnectionError(), 2: "third"}, advance=3600)
    assert build(clock, max_hedged_attempts=2, delay=math.inf).execute(replicas) == "third"
    assert set(replicas.threads.values()) == {threading.get_ident()}


def test_a_negative_generated_delay_is_fallback_mode(clock: FakeTimeProvider) -> None:
    """A negative generated delay is Polly's fallback mode (`GetHedgingDelayAsync_GeneratorSet(-1)`):
    nothing starts on the pool; the next attempt runs on the caller's thread after a failure."""
    replicas = Replicas(clock, {0: ConnectionError(), 1: "second"}, advance=3600)
    pipeline = build(clock, max_hedged_attempts=2, delay=0, delay_generator=lambda _args: -1)
    assert pipeline.execute(replicas) == "second"
    assert replicas.started == [0, 1]
    assert set(replicas.threads.values()) == {threading.get_ident()}


def test_every_attempt_handled_raises_the_original(clock: FakeTimeProvider) -> None:
    """All handled: the original call's exception propagates unchanged, as in Polly."""
    original = ConnectionError("first")
    replicas = Replicas(clock, {0: original, 1: ConnectionError("last")})
    with pytest.raises(ConnectionError) as caught:
        build(clock, delay=5).execute(replicas)
    assert caught.value is original


def test_parallel_mode_runs_every_hedge_on_the_pool(clock: FakeTimeProvider) -> None:
    """`delay=0`: attempts 1..3 start on pool threads while attempt 0 runs; the first answer wins."""
    replicas = Replicas(clock, {2: "third"}, barrier=threading.Barrier(4))
    assert build(clock, max_hedged_attempts=3, delay=0).execute(replicas) == "third"
    assert sorted(replicas.started) == [0, 1, 2, 3]
    assert replicas.ended[2] == "returned"
    assert {replicas.ended[n] for n in (0, 1, 3)} == {"raised OperationAbortedError"}


def test_the_callers_abort_reaches_every_attempt_and_starts_nothing(clock: FakeTimeProvider) -> None:
    """The caller's signal aborts: attempts see it; no further attempt starts; the reason propagates."""
    signal = Signal()

    def abort_caller(_context: ResilienceContext) -> str:
        signal.abort()
        raise ConnectionError  # handled, but the caller has gone: no more hedges

    replicas = Replicas(clock, {1: abort_caller}, advance=1)
    with use_context(signal=signal), pytest.raises(OperationAbortedError):
        build(clock, max_hedged_attempts=3, delay=1).execute(replicas)
    assert sorted(replicas.started) == [0, 1]


def test_hedging_inside_a_sync_timeout(clock: FakeTimeProvider) -> None:
    """An outer (cooperative) timeout aborts every attempt's signal; `TimeoutRejectedError` is raised."""

    def timed_out(_context: ResilienceContext) -> str:
        clock.advance(2)  # the outer deadline (3 s after the start)
        assert _context.signal.wait(REAL_WAIT)
        _context.signal.raise_if_aborted()
        return "never"

    replicas = Replicas(clock, {1: timed_out}, advance=1)
    pipeline = ResiliencePipelineBuilder(time_provider=clock).add_timeout(3).add_hedging(delay=1).build()
    with pytest.raises(TimeoutRejectedError):
        pipeline.execute(replicas)
    assert replicas.ended == {0: "raised TimeoutRejectedError", 1: "raised TimeoutRejectedError"}


def test_a_lock_outside_hedging_covers_the_pool_attempts(clock: FakeTimeProvider) -> None:
    """One lease: a pool attempt sees the same fencing token, and the lock is released after it ends."""
    events: list[TelemetryEvent] = []
    tokens: dict[int, int | None] = {}

    def token(context: ResilienceContext) -> str:
        tokens[context.attempt] = get_lock_token()
        return "hedge"

    replicas = Replicas(clock, {1: token}, advance=1)
    pipeline = (
        ResiliencePipelineBuilder(time_provider=clock, telemetry=TelemetryOptions(listeners=[events.append]))
        .add_lock("job", ttl=30)
        .add_hedging(delay=1)
        .build()
    )
    assert pipeline.execute(replicas) == "hedge"
    assert tokens[1] is not None
    names = [e.name for e in events if e.name.startswith("OnLock") or e.name == "ExecutionAttempt"]
    assert names[0] == "OnLockAcquired"
    assert names[-1] == "OnLockReleased"
    assert names.count("ExecutionAttempt") == 2


def test_pool_attempts_see_the_callers_contextvars(clock: FakeTimeProvider) -> None:
    """A hedged attempt on a pool thread runs in a copy of the caller's `contextvars`."""
    request_id: contextvars.ContextVar[str] = contextvars.ContextVar("request_id", default="none")
    replicas = Replicas(clock, {1: lambda _context: request_id.get()}, advance=1)
    request_id.set("r-42")
    assert build(clock, delay=1).execute(replicas) == "r-42"


def test_action_generator_on_a_pool_thread(clock: FakeTimeProvider) -> None:
    """The other callable gets the original arguments; a nested execution inside it is its own."""
    inner = ResiliencePipelineBuilder().build()
    seen: list[HedgingActionArguments] = []

    def primary(key: str) -> str:
        clock.advance(1)
        context = get_context()
        assert context is not None
        assert context.signal.wait(REAL_WAIT)
        context.signal.raise_if_aborted()
        return "never"

    def secondary(key: str) -> str:
        return inner.execute(str.upper, key)  # the nested execution calls its own callable

    def actions(args: HedgingActionArguments) -> Callable[[str], str]:
        seen.append(args)
        return secondary

    assert build(clock, delay=1, action_generator=actions).execute(primary, "k") == "K"
    assert seen[0].callback is primary


def test_a_base_exception_of_a_pool_attempt_propagates(clock: FakeTimeProvider) -> None:
    """A `BaseException` in a hedged attempt ends the execution with it, raised in the caller."""

    class Stop(BaseException):
        pass

    replicas = Replicas(clock, {1: Stop()}, advance=1)
    with pytest.raises(Stop):
        build(clock, delay=1, handle=lambda _outcome: True).execute(replicas)
    assert replicas.ended[0] == "raised OperationAbortedError"


def test_a_failing_on_hedging_propagates(clock: FakeTimeProvider) -> None:
    """An exception from `on_hedging` on a pool thread is raised in the caller; attempt 0 is aborted."""

    def on_hedging(_args: OnHedgingArguments) -> None:
        raise RuntimeError("callback bug")

    replicas = Replicas(clock, {}, advance=1)
    with pytest.raises(RuntimeError, match="callback bug"):
        build(clock, delay=1, on_hedging=on_hedging).execute(replicas)
    assert replicas.ended == {0: "raised OperationAbortedError"}


def test_a_hedge_still_queued_when_the_execution_ends_never_runs(
    clock: FakeTimeProvider, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A saturated pool queues the hedge; the winner withdraws it and returns without waiting."""
    pool = Pool("hedging", 1)
    monkeypatch.setattr(hedging_module, "POOL", pool)
    busy, release = threading.Event(), threading.Event()
    pool.submit(lambda: (busy.set(), release.wait(REAL_WAIT)))
    assert busy.wait(REAL_WAIT)
    try:
        replicas = Replicas(clock, {0: "original"}, advance=1)
        assert build(clock, delay=1).execute(replicas) == "original"
        assert replicas.started == [0]
    finally:
        release.set()


def test_a_hedge_queued_behind_a_saturated_pool_runs_on_the_waiting_caller(
    clock: FakeTimeProvider, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Attempt 0 failed while the hedge waits for a pool thread: the idle caller runs it itself."""
    pool = Pool("hedging", 1)
    monkeypatch.setattr(hedging_module, "POOL", pool)
    busy, release = threading.Event(), threading.Event()
    pool.submit(lambda: (busy.set(), release.wait(REAL_WAIT)))
    assert busy.wait(REAL_WAIT)
    try:
        replicas = Replicas(clock, {0: ConnectionError("primary down"), 1: "hedge"}, advance=1)
        assert build(clock, delay=1).execute(replicas) == "hedge"
        assert replicas.threads[1] == threading.get_ident()
    finally:
        release.set()


def test_an_aborted_execution_withdraws_its_queued_hedge(
    clock: FakeTimeProvider, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An outer timeout fires while the hedge waits for a pool thread: it never starts, nothing waits for it."""
    pool = Pool("hedging", 1)
    monkeypatch.setattr(hedging_module, "POOL", pool)
    busy, release, freed = threading.Event(), threading.Event(), threading.Event()
    pool.submit(lambda: (busy.set(), release.wait(REAL_WAIT), freed.set()))
    assert busy.wait(REAL_WAIT)

    def times_out(context: ResilienceContext) -> str:
        clock.advance(2)  # the outer deadline, 3 s after the start; the hedge is queued since 1 s
        assert context.signal.wait(REAL_WAIT)
        context.signal.raise_if_aborted()
        return "never"

    replicas = Replicas(clock, {0: times_out}, advance=1)
    pipeline = ResiliencePipelineBuilder(time_provider=clock).add_timeout(3).add_hedging(delay=1).build()
    try:
        with pytest.raises(TimeoutRejectedError):
            pipeline.execute(replicas)
        assert not freed.is_set(), "the execution waited for the pool's thread"
    finally:
        release.set()
    assert replicas.started == [0]
    assert clock.pending_timers == 0


def test_the_pool_is_bounded_and_withdraws_queued_jobs() -> None:
    """At most `size` threads; a queued job can be withdrawn; idle threads end."""
    pool = Pool("hedging", 2, idle=0.01)
    release = threading.Event()
    ran: list[str] = []
    started = threading.Semaphore(0)

    def blocker() -> None:
        started.release()
        release.wait(REAL_WAIT)

    pool.submit(blocker)
    pool.submit(blocker)
    assert started.acquire(timeout=REAL_WAIT)
    assert started.acquire(timeout=REAL_WAIT)

    def queued() -> None:
        ran.append("queued")

    pool.submit(queued)
    assert pool.threads == 2
    assert pool.withdraw(queued)
    assert not pool.withdraw(queued)
    release.set()
    for _ in range(1000):  # bounded: idle threads end after idle_seconds
        if pool.threads == 0:
            break
        threading.Event().wait(0.01)
    assert pool.threads == 0
    assert ran == []
    assert POOL_SIZE == 16


def test_a_job_that_raises_does_not_kill_its_thread(caplog: pytest.LogCaptureFixture) -> None:
    """A bug in a job is logged; the thread keeps serving."""
    pool = Pool("hedging", 1)
    done = threading.Event()

    def broken() -> None:
        raise RuntimeError("bug")

    pool.submit(broken)
    pool.submit(done.set)
    assert done.wait(REAL_WAIT)
    assert "a job on hedging raised" in caplog.text


def test_delay_generator_chooses_each_delay(clock: FakeTimeProvider) -> None:
    """`delay_generator` gets the number of the attempt the delay precedes; None keeps `delay`.

    Attempt 1 starts 0.5 s after attempt 0 (generated), attempt 2 3 s after attempt 1 (`delay`).
    """
    asked: list[int] = []
    events: list[TelemetryEvent] = []
    first_hedge = threading.Event()
    pending: list[int] = []

    def delays(args: HedgingDelayArguments) -> float | None:
        asked.append(args.attempt)
        assert isinstance(args.context, ResilienceContext)
        return 0.5 if args.attempt == 1 else None

    def original(context: ResilienceContext) -> str:
        clock.advance(0.5)
        assert first_hedge.wait(REAL_WAIT)  # attempt 1 runs: the delay before attempt 2 is armed
        clock.advance(2.9)
        pending.append(clock.pending_timers)  # attempt 2 not started yet: its delay still pending
        clock.advance(0.1)
        pending.append(clock.pending_timers)
        assert context.signal.wait(REAL_WAIT)
        context.signal.raise_if_aborted()
        return "never"

    def hedge(context: ResilienceContext) -> str:
        first_hedge.set()
        assert context.signal.wait(REAL_WAIT)
        context.signal.raise_if_aborted()
        return "never"

    replicas = Replicas(clock, {0: original, 1: hedge, 2: "third"})
    pipeline = build(clock, events, max_hedged_attempts=2, delay=3, delay_generator=delays)
    assert pipeline.execute(replicas) == "third"
    assert sorted(replicas.started) == [0, 1, 2]
    assert asked == [1, 2]
    assert pending == [1, 0]
    waited = {e.arguments.attempt: e.arguments.duration for e in events if e.name == "OnHedging"}  # type: ignore[union-attr]
    assert waited == {1: 0.5, 2: 3.0}
    assert replicas.ended == {0: "raised OperationAbortedError", 1: "raised OperationAbortedError", 2: "returned"}


def test_handled_results_hedge_and_the_original_result_is_returned(clock: FakeTimeProvider) -> None:
    """`handle_result` makes results hedgeable (at once, on the caller's thread); when all are
    handled the original call's is returned (Polly's `..._AllAttemptsFail..._OriginalCallIsTheSlowest`
    returns the primary's too); an unhandled result wins."""
    events: list[TelemetryEvent] = []
    replicas = Replicas(clock, {0: 503, 1: 502})
    assert build(clock, events, delay=10, handle_result=lambda status: status >= 500).execute(replicas) == 503
    assert replicas.started == [0, 1]
    assert set(replicas.threads.values()) == {threading.get_ident()}
    reported = [e for e in events if e.name == "ExecutionAttempt"]
    assert [(e.arguments.attempt, e.arguments.handled) for e in reported] == [(0, True), (1, True)]  # type: ignore[union-attr]
    assert [e.severity for e in reported] == [Severity.WARNING, Severity.ERROR]  # handled, then handled and the last
    [hedging] = [e for e in events if e.name == "OnHedging"]
    assert hedging.arguments.duration == 0.0  # type: ignore[union-attr]

    replicas = Replicas(clock, {0: 503, 1: 200, 2: "never"})
    pipeline = build(clock, max_hedged_attempts=2, delay=10, handle_result=lambda status: status >= 500)
    assert pipeline.execute(replicas) == 200
    assert replicas.started == [0, 1]


def test_an_unhandled_result_wins_without_a_hedge(clock: FakeTimeProvider) -> None:
    """A result `handle_result` does not handle is the answer: no hedged attempt starts."""
    events: list[TelemetryEvent] = []
    replicas = Replicas(clock, {0: 200, 1: "never"})
    assert build(clock, events, delay=10, handle_result=lambda status: status >= 500).execute(replicas) == 200
    assert replicas.started == [0]
    assert [e.name for e in events if e.name == "OnHedging"] == []
    assert clock.pending_timers == 0


def test_retry_around_hedging_runs_a_hedged_execution_per_retry(auto_clock: FakeTimeProvider) -> None:
    """Retry outside hedging: each retry is a whole hedged execution (both attempts handled)."""
    calls: list[tuple[int, int]] = []
    retry_attempts: list[int] = []

    def work() -> str:
        context = get_context()
        assert context is not None
        calls.append((len(retry_attempts), context.attempt))
        if len(calls) < 4:
            raise ConnectionError
        return "ok"

    def on_retry(args: Any) -> None:
        retry_attempts.append(args.attempt)

    pipeline = (
        ResiliencePipelineBuilder(time_provider=auto_clock)
        .add_retry(max_retries=2, delay=1, on_retry=on_retry)
        .add_hedging(delay=10)
        .build()
    )
    assert pipeline.execute(work) == "ok"
    assert calls == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert retry_attempts == [0]


def test_settle_returns_the_winner_or_the_original_failure(clock: FakeTimeProvider) -> None:
    """`settle` gives `Ok(winner)`, or `Err(the original call's handled failure)`."""
    assert build(clock, delay=10).settle(Replicas(clock, {0: ConnectionError(), 1: 7})) == Ok(7)
    original = LookupError("first")
    outcome = build(clock, delay=10).settle(Replicas(clock, {0: original, 1: ConnectionError("last")}))
    assert isinstance(outcome, Err)
    assert outcome.error is original
