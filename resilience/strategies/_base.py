"""The protocol every strategy implements: an execution hook over the inner call, sync and async.

A strategy receives `callback(context)`, the rest of the pipeline, and the context it runs
under; it may call it once (timeout), several times (retry), or not at all (an open circuit).
Decisions live in pure cores that take `now` and an outcome; the two hooks only perform them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol, TypeVar, runtime_checkable

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Iterable

    from resilience._context import ResilienceContext
    from resilience._time import TimeProvider
    from resilience.telemetry._source import TelemetrySource

__all__ = [
    "HANDS_ON",
    "DeclaresTraits",
    "Strategy",
    "StrategyBuildContext",
    "StrategyOptions",
    "StrategyTraits",
    "traits_of",
]

T = TypeVar("T")


@runtime_checkable
class Strategy(Protocol):
    """A built strategy: the sync and async hooks around the inner part of the pipeline.

    `callback(context)` runs the inner strategies and, last, the user's callable, under the
    context given (derive one with `context.derive(...)` to give the inner part its own signal
    or attempt). Exceptions flow as exceptions; a hook never swallows a `BaseException` that is
    not an `Exception`.
    """

    def execute(self, callback: Callable[[ResilienceContext], T], context: ResilienceContext, /) -> T:
        """Run `callback` (the inner pipeline) in a sync execution."""
        ...

    async def execute_async(
        self, callback: Callable[[ResilienceContext], Awaitable[T]], context: ResilienceContext, /
    ) -> T:
        """Run `callback` (the inner pipeline) in an asyncio execution."""
        ...


@dataclass(frozen=True, slots=True)
class StrategyTraits:
    """What the pipeline needs to know about a strategy beyond its two hooks.

    A strategy declares them with a `traits` attribute (`DeclaresTraits`); one that does not
    has these defaults. The pipeline reads them once, at `build()`.
    """

    sync_problem: str | None = None
    """Why a sync execution cannot run this strategy (an asyncio-only store), or None.

    The pipeline raises it as a `ValidationError` before any strategy runs."""
    async_problem: str | None = None
    """Why an asyncio execution cannot run it, or None (see `sync_problem`)."""
    inert: bool = False
    """The strategy can never act (switched-off chaos): `build()` leaves it out, so it costs nothing."""
    hands_on_context: bool = False
    """The strategy always calls `callback` with the context it received or one derived from it.

    The execution's call travels on those contexts (`derive`, `derive_scope`), as with every
    built-in strategy. In a pipeline with a strategy that does not declare it, the execution's
    context is also the ambient one while the strategies run (one context-variable set and
    reset per execution), so that a context such a strategy made itself still finds the call."""


NO_TRAITS = StrategyTraits()
HANDS_ON = StrategyTraits(hands_on_context=True)
"""The traits of a built-in strategy with nothing else to declare."""


@runtime_checkable
class DeclaresTraits(Protocol):
    """A strategy that declares its `StrategyTraits`."""

    @property
    def traits(self) -> StrategyTraits:
        """The strategy's traits (read once, at `build()`)."""
        ...


def traits_of(strategy: object) -> StrategyTraits:
    """The traits `strategy` declares, or the defaults."""
    return strategy.traits if isinstance(strategy, DeclaresTraits) else NO_TRAITS


@dataclass(frozen=True, slots=True)
class StrategyBuildContext:
    """What `build()` hands each strategy's options: the pipeline's identity, clock and telemetry."""

    pipeline_name: str | None
    pipeline_instance: str | None
    time_provider: TimeProvider
    telemetry: TelemetrySource
    """A telemetry source already named after the strategy."""
    closers: list[Callable[[], object]] = field(default_factory=list, repr=False)
    """What `on_close` registered: shared by every strategy of one `build()`."""

    def on_close(self, callback: Callable[[], object], /) -> None:
        """Run `callback` when the pipeline closes, once its executions in flight have ended.

        For background work the strategy started itself (a sync thread, a task, a pool): a
        pipeline's `close()`, or a registry's reload that replaces it, stops it. Callbacks run
        in the reverse order of registration; one that raises does not stop the others.
        """
        self.closers.append(callback)


@runtime_checkable
class StrategyOptions(Protocol):
    """Immutable options of a strategy: validated, then turned into a `Strategy`, at `build()`."""

    @property
    def name(self) -> str:
        """The strategy's name, the prefix of its problems and its telemetry `strategy.name`."""
        ...

    def validate(self, context: StrategyBuildContext, /) -> Iterable[str]:
        """Every problem with the options, each as `"<option>: <what is wrong>"`."""
        ...

    def create(self, context: StrategyBuildContext, /) -> Strategy:
        """A fresh strategy with fresh state (called once per `build()`, after `validate`)."""
        ...
