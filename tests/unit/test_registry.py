"""The pipeline registry: one pipeline per key, built once, reloaded in place."""

from __future__ import annotations

import asyncio
import sys
import threading
from typing import TYPE_CHECKING, Any

import pytest

from resilience import (
    BrokenCircuitError,
    RateLimiterRejectedError,
    ResilienceContext,
    ResiliencePipeline,
    ResiliencePipelineBuilder,
    ResiliencePipelineRegistry,
    ResiliencePropertyKey,
    ValidationError,
    get_context,
)
from resilience.telemetry import TelemetryEvent, TelemetryOptions
from resilience.testing import FakeTimeProvider
from tests.unit.modes import MODES, run

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Hashable

SEEN: ResiliencePropertyKey[list[int]] = ResiliencePropertyKey("seen")


class Stamp:
    """A strategy that writes its configuration's version into the execution, on entry and exit."""

    def __init__(self, version: int) -> None:
        self.version = version

    def _seen(self, context: ResilienceContext) -> list[int]:
        seen = context.properties.get(SEEN)
        if seen is None:
            seen = []
            context.properties.set(SEEN, seen)
        return seen

    def execute(self, callback: Callable[[ResilienceContext], Any], context: ResilienceContext) -> Any:
        seen = self._seen(context)
        seen.append(self.version)
        try:
            return callback(context)
        finally:
            seen.append(self.version)

    async def execute_async(
        self, callback: Callable[[ResilienceContext], Awaitable[Any]], context: ResilienceContext
    ) -> Any:
        seen = self._seen(context)
        seen.append(self.version)
        try:
            return await callback(context)
        finally:
            seen.append(self.version)


def seen() -> list[int]:
    """The stamps of the running execution (the very list, completed as the strategies return)."""
    context = get_context()
    assert context is not None
    return context.properties[SEEN]


class Versions:
    """A `configure` whose every call builds the next version: three `Stamp`s of it."""

    def __init__(self) -> None:
        self.version = 0
        self.calls: list[Hashable] = []
        self.lock = threading.Lock()

    def __call__(self, builder: ResiliencePipelineBuilder, key: Hashable) -> None:
        with self.lock:
            self.version += 1
            self.calls.append(key)
            version = self.version
        builder.add(Stamp(version)).add(Stamp(version)).add(Stamp(version))


# -- get_or_add, get, contains, clear ---------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
async def test_get_or_add_builds_once_and_returns_the_same_pipeline(mode: str) -> None:
    """`configure(builder, key)` runs on first use only; the pipeline carries the key as instance."""
    events: list[TelemetryEvent] = []
    clock = FakeTimeProvider()
    registry = ResiliencePipelineRegistry(
        name="http", time_provider=clock, telemetry=TelemetryOptions(listeners=[events.append])
    )
    configure = Versions()
    first = registry.get_or_add("api.example.com", configure)
    assert registry.get_or_add("api.example.com", configure) is first
    assert registry.get("api.example.com") is first
    assert configure.calls == ["api.example.com"]
    assert (first.name, first.instance_name, first.time_provider) == ("http", "api.example.com", clock)
    assert await run(first, seen, mode) == [1, 1, 1, 1, 1, 1]
    assert {(e.pipeline_name, e.pipeline_instance) for e in events} == {("http", "api.example.com")}


def test_keys_are_any_hashable_and_the_instance_is_their_str() -> None:
    """A tuple key works; `pipeline.instance` is `str(key)`."""
    registry = ResiliencePipelineRegistry()
    pipeline = registry.get_or_add(("orders", 2), lambda builder, key: builder.add_retry())
    assert pipeline.instance_name == "('orders', 2)"
    assert pipeline.name is None
    assert ("orders", 2) in registry
    assert ("orders", 3) not in registry
    assert len(registry) == 1
    assert "pipelines=1" in repr(registry)


def test_get_of_an_absent_key_raises_key_error() -> None:
    """`get` never builds."""
    with pytest.raises(KeyError):
        ResiliencePipelineRegistry().get("missing")


def test_a_failing_configure_stores_nothing() -> None:
    """If `configure` or `build()` raises, the key stays absent and the next call tries again."""
    registry = ResiliencePipelineRegistry()
    with pytest.raises(ValidationError, match=r"Retry\.max_retries"):
        registry.get_or_add("k", lambda builder, _key: builder.add_retry(max_retries=-1))
    assert "k" not in registry
    pipeline = registry.get_or_add("k", lambda builder, _key: builder.add_retry())
    assert registry.get("k") is pipeline


def test_configure_may_use_other_keys_but_not_its_own() -> None:
    """Asking for another key inside `configure` works; asking for its own key is refused."""
    registry = ResiliencePipelineRegistry()

    def outer(builder: ResiliencePipelineBuilder, _key: Hashable) -> None:
        registry.get_or_add("inner", lambda inner, _inner_key: inner.add_timeout(1))
        builder.add_retry()

    registry.get_or_add("outer", outer)
    assert "inner" in registry

    def selfish(builder: ResiliencePipelineBuilder, key: Hashable) -> None:
        registry.get_or_add(key, selfish)

    with pytest.raises(ValidationError, match="cannot use its own pipeline"):
        registry.get_or_add("selfish", selfish)
    assert "selfish" not in registry
    assert registry.get_or_add("selfish", lambda builder, _key: builder.add_retry()) is registry.get("selfish")


@pytest.mark.parametrize("mode", MODES)
async def test_clear_forgets_every_pipeline_but_they_keep_working(mode: str) -> None:
    """After `clear`, keys are absent and built anew; pipelines given out still run."""
    registry = ResiliencePipelineRegistry()
    configure = Versions()
    old = registry.get_or_add("k", configure)
    registry.clear()
    assert "k" not in registry
    assert len(registry) == 0
    with pytest.raises(KeyError):
        registry.reload("k")
    assert await run(old, seen, mode) == [1] * 6
    new = registry.get_or_add("k", configure)
    assert new is not old
    assert await run(new, seen, mode) == [2] * 6


def test_configure_runs_once_under_32_threads_and_32_tasks() -> None:
    """32 threads and 32 asyncio tasks (on a loop of its own) ask for one new key at once."""
    registry = ResiliencePipelineRegistry()
    configure = Versions()
    inside = threading.Event()

    def slow(builder: ResiliencePipelineBuilder, key: Hashable) -> None:
        inside.set()
        threading.Event().wait(0.05)  # hold the build open while everyone else asks
        configure(builder, key)

    start = threading.Barrier(33)
    got: list[ResiliencePipeline] = []
    errors: list[BaseException] = []

    def thread() -> None:
        try:
            start.wait(timeout=30)
            got.append(registry.get_or_add("shared", slow))
        except BaseException as exc:
            errors.append(exc)

    async def task() -> ResiliencePipeline:
        await asyncio.sleep(0)
        return registry.get_or_add("shared", slow)

    async def tasks() -> None:
        start.wait(timeout=30)
        got.extend(await asyncio.gather(*(task() for _ in range(32))))

    threads = [threading.Thread(target=thread) for _ in range(32)]
    threads.append(threading.Thread(target=lambda: asyncio.run(tasks())))
    for item in threads:
        item.start()
    for item in threads:
        item.join(timeout=60)
    assert errors == []
    assert inside.is_set()
    assert configure.calls == ["shared"]
    assert len(got) == 64
    assert {id(pipeline) for pipeline in got} == {id(registry.get("shared"))}


# -- reload -----------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
async def test_reload_swaps_the_configuration_under_the_same_object(mode: str) -> None:
    """The next execution of the same object runs the new configuration."""
    registry = ResiliencePipelineRegistry()
    configure = Versions()
    pipeline = registry.get_or_add("k", configure)
    assert await run(pipeline, seen, mode) == [1] * 6
    registry.reload("k")
    assert registry.get("k") is pipeline
    assert await run(pipeline, seen, mode) == [2] * 6
    assert configure.calls == ["k", "k"]
    assert "Stamp, Stamp, Stamp" in repr(pipeline)


@pytest.mark.parametrize("mode", MODES)
async def test_reload_starts_circuit_state_fresh(mode: str) -> None:
    """An open circuit is closed again after a reload (as in Polly)."""
    registry = ResiliencePipelineRegistry(time_provider=FakeTimeProvider())
    pipeline = registry.get_or_add(
        "k", lambda builder, _key: builder.add_circuit_breaker(failure_ratio=0.5, minimum_throughput=2)
    )

    def fail() -> None:
        message = "down"
        raise ConnectionError(message)

    for _ in range(2):
        with pytest.raises(ConnectionError):
            await run(pipeline, fail, mode)
    with pytest.raises(BrokenCircuitError):
        await run(pipeline, lambda: "ok", mode)
    registry.reload("k")
    assert await run(pipeline, lambda: "ok", mode) == "ok"


def test_in_flight_sync_executions_finish_on_the_old_configuration() -> None:
    """An execution running during a reload sees only its own version, entry to exit."""
    registry = ResiliencePipelineRegistry()
    pipeline = registry.get_or_add("k", Versions())
    entered, release = threading.Event(), threading.Event()
    result: list[list[int]] = []

    def blocked() -> list[int]:
        entered.set()
        assert release.wait(timeout=30)
        return seen()

    worker = threading.Thread(target=lambda: result.append(pipeline.execute(blocked)))
    worker.start()
    assert entered.wait(timeout=30)
    registry.reload("k")
    assert pipeline.execute(seen) == [2] * 6
    release.set()
    worker.join(timeout=30)
    assert result == [[1] * 6]


async def test_in_flight_async_executions_finish_on_the_old_configuration() -> None:
    """An awaiting execution during a reload sees only its own version, entry to exit."""
    registry = ResiliencePipelineRegistry()
    pipeline = registry.get_or_add("k", Versions())
    entered, release = asyncio.Event(), asyncio.Event()

    async def blocked() -> list[int]:
        entered.set()
        await release.wait()
        return seen()

    async def quick() -> list[int]:
        return seen()

    in_flight = asyncio.create_task(pipeline.execute_async(blocked))
    await entered.wait()
    registry.reload("k")
    assert await pipeline.execute_async(quick) == [2] * 6
    release.set()
    assert await in_flight == [1] * 6


def test_a_failing_reload_keeps_the_current_configuration() -> None:
    """If `configure` raises during a reload, the pipeline runs what it ran before."""
    registry = ResiliencePipelineRegistry()
    configure = Versions()
    fail = threading.Event()

    def flaky(builder: ResiliencePipelineBuilder, key: Hashable) -> None:
        if fail.is_set():
            message = "bad config file"
            raise ValueError(message)
        configure(builder, key)

    pipeline = registry.get_or_add("k", flaky)
    fail.set()
    with pytest.raises(ValueError, match="bad config file"):
        registry.reload("k")
    assert pipeline.execute(seen) == [1] * 6
    with pytest.raises(KeyError):
        registry.reload("absent")


def test_reload_under_load_never_shows_a_half_built_pipeline() -> None:
    """1,000 reloads while threads and tasks execute: no failure, every execution one version."""
    registry = ResiliencePipelineRegistry()
    pipeline = registry.get_or_add("k", Versions())
    stop = threading.Event()
    problems: list[object] = []
    versions: set[int] = set()
    counts = [0, 0]

    def check(stamps: list[int]) -> None:
        if len(stamps) != 6 or len(set(stamps)) != 1:
            problems.append(stamps)
        versions.add(stamps[0])

    def threads() -> None:
        while not stop.is_set():
            try:
                check(pipeline.execute(seen))
            except Exception as exc:
                problems.append(exc)
            counts[0] += 1

    async def quick() -> list[int]:
        await asyncio.sleep(0)
        return seen()

    async def task() -> None:
        while not stop.is_set():
            try:
                check(await pipeline.execute_async(quick))
            except Exception as exc:
                problems.append(exc)
            counts[1] += 1

    async def tasks() -> None:
        await asyncio.gather(*(task() for _ in range(8)))

    workers = [threading.Thread(target=threads) for _ in range(4)]
    workers.append(threading.Thread(target=lambda: asyncio.run(tasks())))
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as possible: many interleavings per reload
    for worker in workers:
        worker.start()
    try:
        for _ in range(1_000):
            registry.reload("k")
    finally:
        stop.set()
        sys.setswitchinterval(interval)
        for worker in workers:
            worker.join(timeout=60)
    assert problems == []
    assert counts[0] > 0
    assert counts[1] > 0
    assert len(versions) > 1
    assert pipeline.execute(seen) == [1_001] * 6


# -- limiter state across reloads -------------------------------------------------------------


def _concurrency_of_two(builder: ResiliencePipelineBuilder, _key: Hashable) -> None:
    builder.add_concurrency_limiter(2)


@pytest.mark.parametrize("mode", MODES)
async def test_a_concurrency_limit_holds_across_reloads(mode: str) -> None:
    """Two holders keep both permits through 5 reloads: every newcomer is rejected; then freed."""
    registry = ResiliencePipelineRegistry()
    pipeline = registry.get_or_add("k", _concurrency_of_two)
    entered, release = threading.Semaphore(0), threading.Event()

    def hold() -> None:
        entered.release()
        assert release.wait(timeout=30)

    holders = [threading.Thread(target=pipeline.execute, args=(hold,)) for _ in range(2)]
    for holder in holders:
        holder.start()
    for _ in holders:
        assert entered.acquire(timeout=30)
    admitted = 0
    for _ in range(5):
        registry.reload("k")
        for _ in range(2):
            try:
                await run(pipeline, lambda: None, mode)
            except RateLimiterRejectedError:
                continue
            admitted += 1
    release.set()
    for holder in holders:
        holder.join(timeout=30)
    assert admitted == 0
    assert await run(pipeline, lambda: "free", mode) == "free"  # the holders' permits came back


def test_a_concurrency_limit_of_two_is_never_exceeded_while_reloading() -> None:
    """8 threads execute in a loop while the registry reloads 5 times: at most 2 run at once."""
    registry = ResiliencePipelineRegistry()
    pipeline = registry.get_or_add("k", _concurrency_of_two)
    lock = threading.Lock()
    running = [0, 0]  # now, most
    stop = threading.Event()

    def busy() -> None:
        with lock:
            running[0] += 1
            running[1] = max(running[1], running[0])
        stop.wait(0.002)
        with lock:
            running[0] -= 1

    def loop() -> None:
        while not stop.is_set():
            try:
                pipeline.execute(busy)
            except RateLimiterRejectedError:
                stop.wait(0.001)

    workers = [threading.Thread(target=loop) for _ in range(8)]
    for worker in workers:
        worker.start()
    for _ in range(5):
        stop.wait(0.05)
        registry.reload("k")
    stop.wait(0.05)
    stop.set()
    for worker in workers:
        worker.join(timeout=30)
    assert 1 <= running[1] <= 2


@pytest.mark.parametrize("mode", MODES)
async def test_a_rate_limit_holds_across_reloads(mode: str) -> None:
    """5 per 10 s, reloaded 5 times within the window: 5 admitted in all; the window then refills."""
    clock = FakeTimeProvider()
    registry = ResiliencePipelineRegistry(time_provider=clock)
    pipeline = registry.get_or_add("k", lambda builder, _key: builder.add_rate_limiter(5, per=10))
    admitted = 0
    for _ in range(6):
        for _ in range(6):
            try:
                await run(pipeline, lambda: None, mode)
            except RateLimiterRejectedError:
                continue
            admitted += 1
        registry.reload("k")
    assert admitted == 5
    clock.advance(10)
    await run(pipeline, lambda: None, mode)


@pytest.mark.parametrize("mode", MODES)
async def test_a_reload_that_changes_a_limiters_options_starts_it_fresh(mode: str) -> None:
    """New options are a new limiter (as a new circuit is): 5 per 10 s becomes 6 per 10 s, all free."""
    clock = FakeTimeProvider()
    registry = ResiliencePipelineRegistry(time_provider=clock)
    limits = [5]
    pipeline = registry.get_or_add("k", lambda builder, _key: builder.add_rate_limiter(limits[0], per=10))
    for _ in range(5):
        await run(pipeline, lambda: None, mode)
    limits[0] = 6
    registry.reload("k")
    for _ in range(6):
        await run(pipeline, lambda: None, mode)
    with pytest.raises(RateLimiterRejectedError):
        await run(pipeline, lambda: None, mode)
