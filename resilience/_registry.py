"""`ResiliencePipelineRegistry`: pipelines by key, built once on first use, reloadable in place.

Lookups read a plain `dict` without a lock (a pipeline is published only once complete).
Building takes a per-key lock, so `configure` runs once per key however many threads ask at
once (tasks of one event loop cannot interleave inside the synchronous `configure`). A
`reload` builds a new pipeline with the same `configure` and hands its strategies to the
pipeline object already given out, in one reference write (`ResiliencePipeline._adopt`):
executions that start afterwards run the new configuration, those in flight finish on theirs.
An in-process limiter whose options did not change keeps its state across the reload (its
permits, its rate buckets: `CARRIED`), so that old and new executions share one limit.
"""

from __future__ import annotations

import contextlib
import threading
from typing import TYPE_CHECKING, Any

from resilience._builder import ResiliencePipelineBuilder
from resilience.exceptions import ValidationError
from resilience.strategies.limiting._concurrency import ConcurrencyLimiterStrategy
from resilience.strategies.limiting._rate import CARRIED, RateLimiterStrategy

if TYPE_CHECKING:
    from collections.abc import Callable, Hashable, Iterable, Iterator

    from resilience._pipeline import ResiliencePipeline
    from resilience._time import TimeProvider
    from resilience.telemetry._options import TelemetryOptions

__all__ = ["ResiliencePipelineRegistry"]


class _Entry:
    """One key's build lock, its `configure`, and who is running it (to catch recursion)."""

    __slots__ = ("builder_thread", "configure", "lock")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.configure: Callable[[ResiliencePipelineBuilder, Any], object] | None = None
        self.builder_thread: int | None = None


class ResiliencePipelineRegistry:
    """Pipelines by key (any hashable): each built once, on first use, and reloadable in place.

    `get_or_add(key, configure)` calls `configure(builder, key)` on a fresh
    `ResiliencePipelineBuilder` the first time a key is asked for, builds it, and returns the
    same pipeline object from then on. Every pipeline of the registry has `name`, the given
    `time_provider` and `telemetry`, and `instance_name` = `str(key)` (the `pipeline.instance`
    telemetry tag).

    `reload(key)` runs the key's `configure` again and swaps the result in under the *same*
    pipeline object: executions that start afterwards run the new configuration (with fresh
    circuit state), while executions already running finish on the old one. An in-process
    concurrency or rate limiter with the same name and the same limits keeps its state (the
    permits held by executions in flight, the requests already counted); one whose limits
    changed starts fresh.
    """

    __slots__ = ("_entries", "_lock", "_name", "_pipelines", "_telemetry", "_time_provider")

    def __init__(
        self,
        *,
        name: str | None = None,
        time_provider: TimeProvider | None = None,
        telemetry: TelemetryOptions | None = None,
    ) -> None:
        self._name = name
        self._time_provider = time_provider
        self._telemetry = telemetry
        self._pipelines: dict[Hashable, ResiliencePipeline] = {}
        self._entries: dict[Hashable, _Entry] = {}
        self._lock = threading.Lock()  # guards the two dicts' writes; never held while building

    def get_or_add(
        self, key: Hashable, configure: Callable[[ResiliencePipelineBuilder, Any], object]
    ) -> ResiliencePipeline:
        """The pipeline for `key`, built with `configure(builder, key)` if the key is new.

        `configure` runs once per key even when many threads ask for a new key at once; the
        others wait for it and get the same pipeline. If it raises (or `build()` does), nothing
        is stored and the error propagates; the next call tries again.
        """
        pipeline = self._pipelines.get(key)
        if pipeline is not None:
            return pipeline
        with self._lock:
            entry = self._entries.setdefault(key, _Entry())
        with _building(entry, key):
            pipeline = self._pipelines.get(key)
            if pipeline is not None:  # built by whoever held the lock before us
                return pipeline
            pipeline = self._build(key, configure)
            entry.configure = configure
            with self._lock:
                # Cleared meanwhile and built again by someone else: theirs is the one in use.
                published = self._pipelines.setdefault(key, pipeline)  # published last, complete
                self._entries.setdefault(key, entry)
        return published

    def get(self, key: Hashable) -> ResiliencePipeline:
        """The pipeline for `key`; `KeyError` if it was never added (or the registry was cleared)."""
        return self._pipelines[key]

    def __contains__(self, key: object) -> bool:
        """Whether a pipeline for `key` is in the registry."""
        return key in self._pipelines

    def __len__(self) -> int:
        """How many pipelines the registry holds."""
        return len(self._pipelines)

    def __iter__(self) -> Iterator[Hashable]:
        """The keys, as they are now (a snapshot: reloading or adding while iterating is fine)."""
        return iter(tuple(self._pipelines))

    def reload(self, key: Hashable) -> None:
        """Configure `key`'s pipeline anew; the same pipeline object runs it from now on.

        Raises `KeyError` if the key is absent. If `configure` or `build()` raises, the
        pipeline keeps its current configuration, `OnPipelineReloadFailed` (Error) is emitted
        and the error propagates; otherwise `OnPipelineReloaded` (Information). The replaced
        configuration's background work stops once its executions in flight have ended.
        """
        pipeline = self._pipelines[key]
        entry = self._entries[key]
        with _building(entry, key):
            configure = entry.configure
            assert configure is not None
            token = CARRIED.set(_limiter_states(pipeline))
            try:
                replacement = self._build(key, configure)
            except Exception as exc:
                pipeline._reload_failed(exc)
                raise
            finally:
                CARRIED.reset(token)
            pipeline._adopt(replacement)

    def clear(self) -> None:
        """Forget every pipeline; pipelines already given out keep working as they are."""
        self._forget()

    def close(self) -> None:
        """Close every pipeline the registry built (`ResiliencePipeline.close`) and forget them.

        Pipelines given out refuse executions from now on; the registry itself can still
        build new ones.
        """
        for pipeline in self._forget():
            pipeline.close()

    def _forget(self) -> Iterable[ResiliencePipeline]:
        """Empty the registry; the pipelines it held."""
        with self._lock:
            pipelines, self._pipelines, self._entries = self._pipelines, {}, {}
        return pipelines.values()

    def _build(
        self, key: Hashable, configure: Callable[[ResiliencePipelineBuilder, Any], object]
    ) -> ResiliencePipeline:
        builder = ResiliencePipelineBuilder(
            name=self._name, instance_name=str(key), time_provider=self._time_provider, telemetry=self._telemetry
        )
        configure(builder, key)
        return builder.build()

    def __repr__(self) -> str:
        return f"<ResiliencePipelineRegistry name={self._name!r} pipelines={len(self._pipelines)}>"


def _limiter_states(pipeline: ResiliencePipeline) -> dict[tuple[Any, ...], Any]:
    """The in-process limiter states of `pipeline`, for the limiters of its reloaded configuration."""
    states: dict[tuple[Any, ...], Any] = {}
    for strategy in pipeline.strategies:
        if isinstance(strategy, ConcurrencyLimiterStrategy | RateLimiterStrategy):
            carry = strategy.carry()
            if carry is not None:
                states.setdefault(carry[0], carry[1])
    return states


@contextlib.contextmanager
def _building(entry: _Entry, key: Hashable) -> Iterator[None]:
    """Hold a key's build lock; refuse a `configure` that asks for its own key (it would deadlock)."""
    if entry.builder_thread == threading.get_ident():
        msg = f"configure for {key!r} asked the registry for {key!r} again: it cannot use its own pipeline"
        raise ValidationError(msg)
    with entry.lock:
        entry.builder_thread = threading.get_ident()
        try:
            yield
        finally:
            entry.builder_thread = None
