"""The hedging strategy: more attempts of the same call, the first acceptable outcome wins.

`HedgingState` (`_core.py`) decides; the shells here start attempts, arm the delays
and report. Each attempt runs under its own derived context (own child signal, `attempt` set
to its number: 0 for the original, 1, 2, ... for the hedged ones).

Who runs an attempt:

- the caller runs attempt 0 itself, and any attempt that becomes due the moment one of its
  own attempts ends with a handled outcome (so Polly's fallback mode, `delay=math.inf`, never
  uses another thread or task);
- an attempt whose delay passed while the others run starts elsewhere: a task of the caller's
  loop (async) or a thread of the small shared pool (sync, `_pool.py`); that runner, in
  turn, runs the next attempt made due by its own attempt's handled end;
- a sync caller whose own attempts have ended takes back the attempts still queued in the pool
  and runs them itself (or, once its signal aborted, drops them unstarted): it never waits for
  a pool thread, so nested hedging and a saturated pool cannot deadlock it.

When the execution finishes (a winner, or every attempt handled), every other attempt's
signal aborts with `OperationAbortedError`: an async attempt is cancelled (its scope turns our
cancellation into that error), a sync one sees its signal (cooperative), and an attempt still
queued in the pool is withdrawn. The execution returns only once no attempt runs any more, so
no attempt outlives it (nor a lock held around it) and a loser's result is dropped.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import math
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from resilience._outcome import Err, Ok, Outcome
from resilience._runtime._threads import resolve_threadsafe
from resilience._validation import Duration, Problems, to_seconds
from resilience.exceptions import OperationAbortedError
from resilience.strategies._base import HANDS_ON
from resilience.strategies._common import Handle, Handler, Steps, check_handle, run_steps, run_steps_async
from resilience.strategies.hedging._core import HedgingState, generated_delay
from resilience.strategies.hedging._pool import POOL
from resilience.strategies.retry._strategy import ExecutionAttemptArguments
from resilience.telemetry._event import Severity

if TYPE_CHECKING:
    import datetime as dt
    from collections.abc import Awaitable, Callable, Iterable

    from resilience._context import ResilienceContext
    from resilience._time import TimeProvider, TimerHandle
    from resilience.strategies._base import StrategyBuildContext
    from resilience.telemetry._source import TelemetrySource

__all__ = [
    "HedgingActionArguments",
    "HedgingDelayArguments",
    "HedgingStrategy",
    "HedgingStrategyOptions",
    "OnHedgingArguments",
    "hedging_strategy",
]

T = TypeVar("T")
MAX_HEDGED_ATTEMPTS = 10


@dataclass(frozen=True, slots=True)
class HedgingActionArguments:
    """What `action_generator` receives for each hedged attempt (`attempt` >= 1)."""

    context: ResilienceContext
    """The hedged attempt's own context."""
    attempt: int
    callback: Callable[..., Any]
    """The callable the pipeline was asked to run (the original call)."""


@dataclass(frozen=True, slots=True)
class HedgingDelayArguments:
    """What `delay_generator` receives: the strategy's context and the attempt the delay precedes."""

    context: ResilienceContext
    attempt: int


@dataclass(frozen=True, slots=True)
class OnHedgingArguments:
    """What `on_hedging` (and the `OnHedging` event) receives as a hedged attempt starts."""

    context: ResilienceContext
    """The hedged attempt's own context."""
    attempt: int
    duration: float
    """Seconds since the previous attempt started: its run time, or the delay it was given."""


@dataclass(frozen=True, slots=True, kw_only=True)
class HedgingStrategyOptions:
    """Options of the hedging strategy (`hedging_strategy(...)`); validated at `build()`."""

    max_hedged_attempts: int = 1
    delay: Duration = 2.0
    delay_generator: Callable[[HedgingDelayArguments], float | dt.timedelta | None] | None = None
    action_generator: Callable[[HedgingActionArguments], Callable[..., Any] | None] | None = None
    handle: Handle = None
    handle_result: Callable[[Any], bool] | None = None
    on_hedging: Callable[[OnHedgingArguments], object] | None = None
    name: str = "Hedging"

    def validate(self, context: StrategyBuildContext, /) -> Iterable[str]:  # noqa: ARG002 - protocol
        """Every problem with these options, as `"<option>: <what>"`."""
        problems = Problems()
        count = problems.integer("max_hedged_attempts", self.max_hedged_attempts, minimum=1)
        if count is not None and count > MAX_HEDGED_ATTEMPTS:
            problems.add("max_hedged_attempts", f"must be <= {MAX_HEDGED_ATTEMPTS}, got {count}")
        problems.duration("delay", self.delay, allow_inf=True)
        problems.callable("delay_generator", self.delay_generator)
        problems.callable("action_generator", self.action_generator)
        check_handle(problems, self.handle)
        problems.callable("handle_result", self.handle_result)
        problems.callable("on_hedging", self.on_hedging)
        problems.name("name", self.name)
        return problems.items

    def create(self, context: StrategyBuildContext, /) -> HedgingStrategy:
        """A hedging strategy for one built pipeline."""
        return HedgingStrategy(self, Handler(self.handle, self.handle_result), context)


def hedging_strategy(
    *,
    max_hedged_attempts: int = 1,
    delay: Duration = 2.0,
    delay_generator: Callable[[HedgingDelayArguments], float | dt.timedelta | None] | None = None,
    action_generator: Callable[[HedgingActionArguments], Callable[..., Any] | None] | None = None,
    handle: Handle = None,
    handle_result: Callable[[Any], bool] | None = None,
    on_hedging: Callable[[OnHedgingArguments], object] | None = None,
    name: str = "Hedging",
) -> HedgingStrategyOptions:
    """Run up to `max_hedged_attempts` (1-10) more attempts of the call; the first acceptable outcome wins.

    A hedged attempt starts when the previous one has not finished within `delay`, or ended
    with a handled outcome (`handle`/`handle_result` as in retry). `delay=0` starts them all at
    once; `delay=math.inf` only after a handled outcome. `delay_generator` may choose each delay
    (None: `delay`; negative: fallback mode); `action_generator` may give a hedged attempt another callable, called with
    the same arguments (None: the original). The other attempts are aborted, and in async
    cancelled and awaited, before the execution returns. When every attempt is handled, the
    original call's outcome is returned or raised (as in Polly). Sync executions run hedged attempts on a small shared
    thread pool: see `docs/hedging.md`.
    """
    return HedgingStrategyOptions(**locals())


class HedgingStrategy:
    """The built hedging strategy."""

    traits = HANDS_ON

    __slots__ = ("_delay", "_handler", "_last_wins", "_options", "_telemetry", "_time")

    def __init__(self, options: HedgingStrategyOptions, handler: Handler, context: StrategyBuildContext) -> None:
        self._options = options
        self._delay = to_seconds(options.delay)
        self._handler = handler
        self._time: TimeProvider = context.time_provider
        self._telemetry: TelemetrySource = context.telemetry
        self._last_wins = False

    def last_outcome_wins(self) -> HedgingStrategy:
        """Answer with the attempt that ended last when every attempt is handled, not the original's.

        For HTTP: each attempt closes the responses the attempts before it left on its thread
        (one connection at a time), so the original call's response is gone by then.
        """
        self._last_wins = True
        return self

    def execute(self, callback: Callable[[ResilienceContext], T], context: ResilienceContext, /) -> T:
        """Run the attempts; return or raise the winning outcome (sync)."""
        context.raise_if_aborted()  # never start the callable under an aborted signal
        return _SyncRun(self, callback, context).execute()  # type: ignore[no-any-return]

    async def execute_async(
        self, callback: Callable[[ResilienceContext], Awaitable[T]], context: ResilienceContext, /
    ) -> T:
        """Run the attempts as tasks of the caller's loop; return or raise the winner (async)."""
        context.raise_if_aborted()
        if self._options.delay_generator is not None or self._delay <= 0:
            return await _AsyncRun(self, callback, context).execute()  # type: ignore[no-any-return]
        # The success path: attempt 0 in this task with one timer; the run's bookkeeping is
        # made only if the timer fires or attempt 0 is handled (`_AsyncStart.promote`).
        start = _AsyncStart(self, callback, context)
        timer = None if self._delay == math.inf else self._time.call_later(self._delay, start.fire)
        result: Any = None
        failure: Err | None = None
        try:
            # As `_AsyncRun.run_from` runs an attempt, without the run's bookkeeping.
            async with start.scope.cancel_scope():
                result = await callback(start.inner)
        except Exception as exc:  # noqa: BLE001 - BaseExceptions end the execution below
            failure = Err(exc)
        except BaseException as exc:
            await start.interrupted(timer, exc)
            raise
        follow = start.after(timer, result, failure)
        if isinstance(follow, Outcome):
            return follow.unwrap()  # type: ignore[no-any-return]
        return await follow[0].execute(follow[1])  # type: ignore[no-any-return]

    def _report(
        self, context: ResilienceContext, attempt: int, outcome: Outcome[Any], started: float, severity: Severity
    ) -> None:
        """`ExecutionAttempt` of an attempt that ended (handled unless Information); the caller checks it is heard."""
        duration = self._time.monotonic() - started
        arguments = ExecutionAttemptArguments(attempt, duration, handled=severity is not Severity.INFORMATION)
        self._telemetry.emit(
            "ExecutionAttempt", severity, operation_key=context.operation_key, outcome=outcome, arguments=arguments
        )

    def __repr__(self) -> str:
        return f"<HedgingStrategy max_hedged_attempts={self._options.max_hedged_attempts} delay={self._delay:g}>"


class _Run:
    """One hedged execution: the state, the attempts' contexts, and what both shells share."""

    __slots__ = (
        "_lock",
        "_timers",
        "callback",
        "context",
        "contexts",
        "fatal",
        "starts",
        "state",
        "strategy",
        "vars",
    )

    def __init__(
        self,
        strategy: HedgingStrategy,
        callback: Callable[[ResilienceContext], Any],
        context: ResilienceContext,
        vars_: contextvars.Context | None = None,
    ) -> None:
        self.strategy = strategy
        self.callback = callback
        self.context = context
        self.state = HedgingState(strategy._options.max_hedged_attempts, last_wins=strategy._last_wins)
        self._lock = threading.Lock()  # attempts end on pool threads; timers fire on others
        self.contexts: dict[int, ResilienceContext] = {}
        self.starts: dict[int, float] = {}
        self._timers: list[TimerHandle] = []
        self.fatal: BaseException | None = None
        # The caller's contextvars, for attempts started elsewhere (a task, a pool thread).
        self.vars = contextvars.copy_context() if vars_ is None else vars_

    # -- decisions, under the lock --------------------------------------------------------------

    def armed(self, attempt: int, delay: float) -> None:
        """After `attempt` started: arm the delay before the next, or start it now (delay 0)."""
        with self._lock:
            wait = self.state.wait_after_launch(attempt, delay)
            if wait is None:
                return
            if wait > 0:
                timer = self.strategy._time.call_later(wait, functools.partial(self.delay_passed, attempt + 1))
                self._timers.append(timer)
                return
            due = self.state.take_due()
        if due is not None:
            self.start_elsewhere(due)

    def delay_passed(self, attempt: int) -> None:
        """The delay before `attempt` passed (on a timer's thread)."""
        with self._lock:
            due = self.state.take_due() if self.state.delay_passed(attempt, aborted=self.aborted) else None
        if due is not None:
            self.start_elsewhere(due)

    def ended(self, attempt: int, outcome: Outcome[Any], handled: bool) -> int | None:
        """Attempt `attempt` ended: report it, finish if it decides, return the attempt due next."""
        with self._lock:
            state = self.state
            handled = handled and not state.finished  # a loser is dropped: its outcome counts for nothing
            finished = state.ended(attempt, outcome, handled=handled, aborted=self.aborted)
            due = state.take_due()
        severity = (Severity.ERROR if finished else Severity.WARNING) if handled else Severity.INFORMATION
        if self.strategy._telemetry.enabled(severity):  # else build nothing
            self.strategy._report(self.context, attempt, outcome, self.starts.get(attempt, 0.0), severity)
        self.after_change(finished=finished, winner=attempt)
        return due

    def ended_fatally(self, attempt: int, error: BaseException) -> None:
        """Attempt `attempt` ended with a `BaseException` (or a callback failed): it is the answer."""
        with self._lock:
            finished = self.state.ended_fatally(attempt)
            if finished:
                self.fatal = error
        self.after_change(finished=finished, winner=attempt)

    def after_change(self, *, finished: bool, winner: int) -> None:
        """After a state change, outside the lock: abort the others if it finished, wake the caller if it settled.

        Read without the lock, `settled` can only have become true since the change (once
        finished, attempts only end), and then whoever settled it wakes the caller too: a
        second wake-up is harmless.
        """
        if finished:
            self.abort_others(winner)
        if self.state.settled:
            self.wake()

    def abort_others(self, winner: int) -> None:
        """Abort every attempt but `winner`, withdraw queued ones, stop the delays."""
        with self._lock:
            timers, self._timers = self._timers, []
            running = [(n, self.contexts.get(n)) for n in self.state.running if n != winner]
        for timer in timers:
            timer.cancel()
        for attempt, context in running:
            if context is not None:
                context.signal.abort(OperationAbortedError(f"hedged attempt {attempt} lost to attempt {winner}"))
            else:
                self.withdraw(attempt)

    def abort_all(self) -> None:
        """The caller is leaving (cancelled, interrupted): abort every attempt."""
        with self._lock:
            self.state.ended_fatally(-1)  # finished on no outcome (unless it had): nothing starts any more
        self.abort_others(-1)

    @property
    def aborted(self) -> bool:
        return self.context.abort_reason is not None

    def result(self) -> Any:
        fatal = self.fatal
        if fatal is not None:
            raise fatal
        final = self.state.final
        assert final is not None
        return final.unwrap()

    def begin(self, attempt: int) -> ResilienceContext | None:
        """The context `attempt` runs under, or None if the execution finished before it started."""
        context = self.context.derive_scope(attempt=attempt)  # its signal is made when read or aborted
        with self._lock:  # atomic with abort_others' snapshot: either it sees us, or we see it
            if not self.state.finished and not (attempt and self.aborted):
                self.contexts[attempt] = context
                return context
        context.end_scope()
        self.abandon(attempt)  # a hedge launched before the caller's abort never starts
        return None

    def abandon(self, attempt: int) -> None:
        """`attempt` was launched and will never start."""
        with self._lock:
            finished = self.state.abandoned(attempt)
        self.after_change(finished=finished, winner=-1)  # nothing runs: only a delay's timer may be left

    def withdraw(self, attempt: int) -> None:
        """`attempt` was launched but has not started: make sure it never does."""

    def wake(self) -> None:
        """Wake the caller if it waits: the execution settled, or a queued job it may take back."""

    def start_elsewhere(self, attempt: int) -> None:
        """Run `attempt` on another runner (a pool thread, a task)."""
        raise NotImplementedError  # pragma: no cover

    # -- what the shells share ------------------------------------------------------------------

    def starting(self, attempt: int, context: ResilienceContext) -> Steps:
        """What precedes an attempt's call, for both shells: report a hedged attempt, arm the next delay.

        The user callbacks are `on_hedging`, `action_generator` and `delay_generator`; the
        steps' answer is the callable `action_generator` gave (None: the original).
        """
        strategy = self.strategy
        options = strategy._options
        now = strategy._time.monotonic()
        self.starts[attempt] = now
        substitute = None
        if attempt:
            arguments = OnHedgingArguments(context, attempt, now - self.starts.get(attempt - 1, now))
            strategy._telemetry.emit(
                "OnHedging", Severity.WARNING, operation_key=context.operation_key, arguments=arguments
            )
            if options.on_hedging is not None:
                yield options.on_hedging, arguments
            target = context.target
            if options.action_generator is not None and target is not None:
                substitute = yield options.action_generator, HedgingActionArguments(context, attempt, target)
        generator = options.delay_generator
        if generator is None:
            delay = strategy._delay
        elif not self.state.can_launch:
            delay = math.inf  # no attempt left to delay
        else:
            generated = yield generator, HedgingDelayArguments(self.context, attempt + 1)
            delay = generated_delay(generated, strategy._delay)
        self.armed(attempt, delay)
        yield None, substitute


class _SyncRun(_Run):
    """A sync hedged execution: attempt 0 on the caller's thread, later ones on the pool."""

    __slots__ = ("_jobs", "_waiter")

    def __init__(
        self, strategy: HedgingStrategy, callback: Callable[[ResilienceContext], Any], context: ResilienceContext
    ) -> None:
        super().__init__(strategy, callback, context)
        self._jobs: dict[int, Callable[[], object]] = {}
        self._waiter: threading.Event | None = None

    def execute(self) -> Any:
        try:
            self.run_from(self.state.launch())  # attempt 0: no other thread knows the run yet
            self.wait()
        except BaseException:
            self.abort_all()  # interrupted (on an attempt of its own, or waiting): leave at once
            raise
        return self.result()

    def wait(self) -> None:
        """Wait until the execution settles, never for an attempt that no thread has taken.

        Invariant: while the caller waits, every attempt of this execution still queued in the
        pool is one it is about to take back (`take_queued`), so it only ever waits for attempts
        a thread is running; nested hedging and a saturated pool cannot leave it waiting for a
        thread that never comes.
        """
        while True:
            with self._lock:
                if self.state.settled:
                    return
                if self._waiter is None:
                    self._waiter = threading.Event()
                waiter = self._waiter
                waiter.clear()
            queued = self.take_queued()
            if queued is None:
                waiter.wait()
            elif self.aborted:
                self.abandon(queued[0])  # launched before the abort: it never starts
            else:
                queued[1]()  # here, as a pool thread would run it (in the run's contextvars)

    def run_from(self, attempt: int | None) -> None:
        """Run `attempt`, then every attempt its handled end makes due, on this thread."""
        while attempt is not None:
            context = self.begin(attempt)
            if context is None:
                return
            try:
                substitute = None
                if attempt or self.strategy._options.delay_generator is not None:
                    substitute = run_steps(self.starting(attempt, context))
                else:  # `starting` with nothing to call back: the first attempt's 3% (docs/decisions.md)
                    self.starts[0] = self.strategy._time.monotonic()
                    self.armed(0, self.strategy._delay)
            except Exception as exc:  # noqa: BLE001 - a callback failed: it is the execution's answer
                context.end_scope()
                self.ended_fatally(attempt, exc)
                return
            try:
                outcome: Outcome[Any] = Ok(self.callback(_calling(context, substitute)))
            except Exception as exc:  # noqa: BLE001 - BaseExceptions end the execution below
                outcome = Err(exc)
            except BaseException as exc:
                self.ended_fatally(attempt, exc)
                raise
            finally:
                context.end_scope()
            attempt = self.ended(attempt, outcome, self.strategy._handler.handles(outcome))

    def start_elsewhere(self, attempt: int) -> None:
        job = functools.partial(self.vars.copy().run, self._job, attempt)
        with self._lock:
            self._jobs[attempt] = job
        POOL.submit(job)
        self.wake()  # if the caller waits, it may take the job back and run it itself

    def take_queued(self) -> tuple[int, Callable[[], object]] | None:
        """An attempt of ours that no pool thread took and its job, withdrawn from the pool (None if none)."""
        while True:
            with self._lock:
                if not self._jobs:
                    return None
                attempt, job = next(iter(self._jobs.items()))
                del self._jobs[attempt]
            if POOL.withdraw(job):
                return attempt, job
            # A pool thread took it meanwhile: it runs there; look at the next one.

    def _job(self, attempt: int) -> None:
        with self._lock:
            self._jobs.pop(attempt, None)
        with contextlib.suppress(BaseException):  # recorded as the answer by run_from; the caller raises it
            self.run_from(attempt)

    def withdraw(self, attempt: int) -> None:
        with self._lock:
            job = self._jobs.pop(attempt, None)
        if job is not None and POOL.withdraw(job):
            self.abandon(attempt)

    def wake(self) -> None:
        # No lock: the caller makes its waiter and clears it under the lock before it looks at
        # the state again (or at the jobs), and a waker has changed those under the lock first.
        waiter = self._waiter
        if waiter is not None:
            waiter.set()


class _AsyncRun(_Run):
    """An async hedged execution: attempt 0 in the caller's task, later ones as tasks of its loop."""

    __slots__ = ("_loop", "_tasks", "_thread", "_waiter")

    def __init__(
        self,
        strategy: HedgingStrategy,
        callback: Callable[[ResilienceContext], Any],
        context: ResilienceContext,
        vars_: contextvars.Context | None = None,
    ) -> None:
        super().__init__(strategy, callback, context, vars_)
        self._loop = asyncio.get_running_loop()
        self._thread = threading.get_ident()
        self._tasks: set[asyncio.Task[None]] = set()
        self._waiter: asyncio.Future[None] | None = None

    async def execute(self, ended: tuple[int, Outcome[Any], bool] | None = None) -> Any:
        """Run from attempt 0, or go on after attempt `ended[0]` ended in this task; then wait."""
        try:
            # Attempt 0 is launched without the lock: no other thread knows the run yet.
            await self.run_from(self.state.launch() if ended is None else self.ended(*ended))
            if not self.state.settled:
                self._waiter = self._loop.create_future()
                await self._waiter
        except BaseException:
            # The caller was cancelled (an outer timeout, its own cancel) or interrupted.
            await self.leave()
            raise
        return self.result()

    async def leave(self) -> None:
        """Abort every attempt and wait until each has ended (the caller is leaving)."""
        self.abort_all()
        cancelled = False
        while pending := [task for task in self._tasks if not task.done()]:
            try:
                await asyncio.wait(pending)
            except asyncio.CancelledError:
                cancelled = True  # cancelled again while cleaning up: finish cleaning first
        if cancelled:
            raise asyncio.CancelledError

    async def run_from(self, attempt: int | None) -> None:
        """Run `attempt`, then every attempt its handled end makes due, in this task."""
        while attempt is not None:
            context = self.begin(attempt)
            if context is None:
                return
            scope = context.signal  # the attempt's own: aborting it cancels the attempt
            try:
                substitute = await run_steps_async(self.starting(attempt, context))
            except Exception as exc:  # noqa: BLE001 - a callback failed: it is the execution's answer
                scope.detach()
                self.ended_fatally(attempt, exc)
                return
            try:
                async with scope.cancel_scope():  # an abort cancels the attempt and raises the reason
                    outcome: Outcome[Any] = Ok(await self.callback(_calling(context, substitute)))
            except Exception as exc:  # noqa: BLE001 - BaseExceptions end the execution below
                outcome = Err(exc)
            except BaseException as exc:
                self.ended_fatally(attempt, exc)
                raise
            finally:
                scope.detach()
            attempt = self.ended(attempt, outcome, self.strategy._handler.handles(outcome))

    def start_elsewhere(self, attempt: int) -> None:
        if threading.get_ident() != self._thread:  # a timer fired on another thread
            self._loop.call_soon_threadsafe(self.start_elsewhere, attempt)
            return
        self._tasks.add(self._loop.create_task(self._job(attempt), context=self.vars.copy()))

    async def _job(self, attempt: int) -> None:
        with contextlib.suppress(BaseException):  # recorded as the answer by run_from; the caller raises it
            await self.run_from(attempt)

    def wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            if threading.get_ident() == self._thread:
                waiter.set_result(None)
            else:  # pragma: no cover - attempts end on the loop; a future is not thread-safe, so never risk it
                resolve_threadsafe(self._loop, waiter)


def _calling(context: ResilienceContext, substitute: Callable[..., Any] | None) -> ResilienceContext:
    """The attempt's context, calling `substitute` (from `action_generator`) in place of the callable."""
    return context if substitute is None else context.derive(substitute=substitute)


class _AsyncStart:
    """Attempt 0 of an async execution before anything else happened (the success path).

    The timer's `fire` (after `delay`) or a handled outcome of attempt 0 `promote`s it to a full
    `_AsyncRun` that knows attempt 0 runs in the caller's task.
    """

    __slots__ = (
        "callback",
        "context",
        "done",
        "inner",
        "loop",
        "run",
        "scope",
        "started",
        "strategy",
        "thread",
        "vars",
    )

    def __init__(
        self, strategy: HedgingStrategy, callback: Callable[[ResilienceContext], Any], context: ResilienceContext
    ) -> None:
        self.strategy = strategy
        self.callback = callback
        self.context = context
        scope = self.scope = context.signal.child()
        self.inner = context.derive(signal=scope, attempt=0)
        self.loop = asyncio.get_running_loop()
        self.thread = threading.get_ident()
        self.vars = contextvars.copy_context()
        self.run: _AsyncRun | None = None
        self.done = False
        self.started = strategy._time.monotonic()

    def fire(self) -> None:
        """The delay passed while attempt 0 runs: start attempt 1."""
        if threading.get_ident() != self.thread:  # a timer of another thread: go to the loop
            self.loop.call_soon_threadsafe(self.fire)
            return
        if not self.done:
            self.promote().delay_passed(1)

    async def interrupted(self, timer: TimerHandle | None, error: BaseException) -> None:
        """Attempt 0 ended with a `BaseException`: any hedged attempt ends before it propagates."""
        self.done = True
        if timer is not None:
            timer.cancel()
        self.scope.detach()
        run = self.run
        if run is not None:
            run.ended_fatally(0, error)
            await run.leave()

    def after(
        self, timer: TimerHandle | None, result: object, failure: Err | None
    ) -> Outcome[Any] | tuple[_AsyncRun, tuple[int, Outcome[Any], bool]]:
        """Attempt 0 ended: the answer, or the run that goes on (and how attempt 0 ended)."""
        self.done = True
        if timer is not None:
            timer.cancel()
        self.scope.detach()
        strategy = self.strategy
        outcome: Outcome[Any] = Ok(result) if failure is None else failure
        handler = strategy._handler
        handled = (failure is not None or handler.checks_results) and handler.handles(outcome)
        if self.run is None and not handled:  # attempt 0 won alone
            if strategy._telemetry.enabled(Severity.INFORMATION):
                strategy._report(self.context, 0, outcome, self.started, Severity.INFORMATION)
            return outcome
        return self.promote(), (0, outcome, handled)

    def promote(self) -> _AsyncRun:
        """The full run, with attempt 0 running (or just ended) in the caller's task."""
        run = self.run
        if run is None:
            run = self.run = _AsyncRun(self.strategy, self.callback, self.context, self.vars)
            run.state.launch()
            run.contexts[0] = self.inner
            run.starts[0] = self.started
        return run
