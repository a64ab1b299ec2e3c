"""Closing pipelines and registries: refused executions, background work stopped after in-flight ones, reload events."""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pytest

from resilience import PipelineBuilder, ResiliencePipelineBuilder, ResiliencePipelineRegistry, ValidationError
from resilience.telemetry import Severity, TelemetryEvent, TelemetryOptions

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Iterable

    from resilience import ResilienceContext
    from resilience.strategies import StrategyBuildContext


class Background:
    """A strategy with background work of its own: a thread that runs until the pipeline closes."""

    def __init__(self, stopped: list[str], name: str) -> None:
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.stop.wait, name=f"background-{name}", daemon=True)
        self.thread.start()
        self._stopped = stopped
        self._name = name

    def close(self) -> None:
        self._stopped.append(self._name)
        self.stop.set()

    def execute(self, callback: Callable[[ResilienceContext], Any], context: ResilienceContext, /) -> Any:
        return callback(context)

    async def execute_async(
        self, callback: Callable[[ResilienceContext], Awaitable[Any]], context: ResilienceContext, /
    ) -> Any:
        return await callback(context)


@dataclass(frozen=True)
class BackgroundOptions:
    stopped: list[str]
    built: list[Background]
    name: str = "Background"

    def validate(self, context: StrategyBuildContext, /) -> Iterable[str]:
        return ()

    def create(self, context: StrategyBuildContext, /) -> Background:
        strategy = Background(self.stopped, f"{self.name}-{len(self.built)}")
        self.built.append(strategy)
        context.on_close(strategy.close)
        return strategy


def wait_until(condition: Callable[[], bool], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.005)


def test_a_closed_pipeline_refuses_executions_sync_and_async() -> None:
    pipeline = ResiliencePipelineBuilder().add_retry(delay=0).build()
    assert pipeline.execute(lambda: 1) == 1
    pipeline.close()
    pipeline.close()  # idempotent
    with pytest.raises(ValidationError, match="pipeline closed"):
        pipeline.execute(lambda: 1)
    assert isinstance(pipeline.settle(lambda: 1).error, ValidationError)

    async def one() -> int:
        return 1

    with pytest.raises(ValidationError, match="pipeline closed"):
        asyncio.run(pipeline.execute_async(one))


def test_an_empty_pipeline_closes_too() -> None:
    pipeline = PipelineBuilder().build()
    with pipeline:
        assert pipeline.execute(lambda: 2) == 2
    with pytest.raises(ValidationError, match="pipeline closed"):
        pipeline.execute(lambda: 2)


def test_closing_stops_the_background_work_the_strategies_started() -> None:
    stopped: list[str] = []
    built: list[Background] = []
    with PipelineBuilder().add(BackgroundOptions(stopped, built)).build() as pipeline:
        assert pipeline.execute(lambda: "ok") == "ok"
        assert built[0].thread in threading.enumerate()
    assert stopped == ["Background-0"]
    wait_until(lambda: built[0].thread not in threading.enumerate())


async def test_async_with_closes() -> None:
    stopped: list[str] = []
    async with PipelineBuilder().add(BackgroundOptions(stopped, [])).build() as pipeline:

        async def three() -> int:
            return 3

        assert await pipeline.execute_async(three) == 3
        assert stopped == []
    assert stopped == ["Background-0"]
    with pytest.raises(ValidationError, match="pipeline closed"):
        await pipeline.execute_async(three)


def test_background_work_stops_only_when_the_executions_in_flight_end() -> None:
    stopped: list[str] = []
    pipeline = PipelineBuilder().add(BackgroundOptions(stopped, [])).build()
    inside, release = threading.Event(), threading.Event()

    def body() -> str:
        inside.set()
        release.wait(5)
        return "finished"

    results: list[str] = []
    runner = threading.Thread(target=lambda: results.append(pipeline.execute(body)))
    runner.start()
    assert inside.wait(5)
    pipeline.close()
    assert stopped == []  # an execution still runs on the old configuration
    release.set()
    runner.join(5)
    assert results == ["finished"]
    assert stopped == ["Background-0"]


def test_a_failing_closer_does_not_keep_the_others_running(caplog: pytest.LogCaptureFixture) -> None:
    stopped: list[str] = []

    @dataclass(frozen=True)
    class Failing(BackgroundOptions):
        def create(self, context: StrategyBuildContext, /) -> Background:
            strategy = super().create(context)
            context.on_close(lambda: 1 / 0)
            return strategy

    pipeline = PipelineBuilder().add(Failing(stopped, [], name="A")).add(BackgroundOptions(stopped, [], "B")).build()
    pipeline.close()
    assert sorted(stopped) == ["A-0", "B-0"]
    assert "a close callback raised" in caplog.text


def test_the_registry_reload_events_and_the_old_configuration_closed() -> None:
    events: list[TelemetryEvent] = []
    stopped: list[str] = []
    built: list[Background] = []
    registry = ResiliencePipelineRegistry(name="api", telemetry=TelemetryOptions(listeners=[events.append]))
    failing = False

    def configure(builder: ResiliencePipelineBuilder, key: object) -> None:
        if failing:
            msg = "bad configuration"
            raise RuntimeError(msg)
        builder.add(BackgroundOptions(stopped, built))

    pipeline = registry.get_or_add("orders", configure)
    registry.reload("orders")
    assert stopped == ["Background-0"]
    reloaded = [e for e in events if e.name == "OnPipelineReloaded"]
    assert [(e.severity, e.pipeline_name, e.pipeline_instance) for e in reloaded] == [
        (Severity.INFORMATION, "api", "orders")
    ]
    failing = True
    with pytest.raises(RuntimeError, match="bad configuration"):
        registry.reload("orders")
    [failed] = [e for e in events if e.name == "OnPipelineReloadFailed"]
    assert failed.severity is Severity.ERROR
    assert isinstance(failed.outcome.error, RuntimeError)  # type: ignore[union-attr]
    assert pipeline.execute(lambda: "still served by the last good configuration") == (
        "still served by the last good configuration"
    )
    assert stopped == ["Background-0"]
    registry.close()
    assert stopped == ["Background-0", "Background-1"]
    with pytest.raises(ValidationError, match="pipeline closed"):
        pipeline.execute(lambda: 1)
    assert "orders" not in registry


def test_a_reload_of_a_closed_pipeline_is_refused_and_builds_nothing_that_runs() -> None:
    stopped: list[str] = []
    built: list[Background] = []
    registry = ResiliencePipelineRegistry()
    pipeline = registry.get_or_add("k", lambda builder, _key: builder.add(BackgroundOptions(stopped, built)))
    pipeline.close()
    with pytest.raises(ValidationError, match="pipeline closed"):
        registry.reload("k")
    assert stopped == ["Background-0", "Background-1"]  # the closed one, and the one built for the reload


def test_reloads_under_load_lose_no_execution_and_leak_no_thread() -> None:
    """1,000 reloads while 8 threads execute: every execution returns, every old configuration
    stops its thread once its last execution ended."""
    stopped: list[str] = []
    built: list[Background] = []
    registry = ResiliencePipelineRegistry()
    pipeline = registry.get_or_add("k", lambda builder, _key: builder.add(BackgroundOptions(stopped, built)))
    done = threading.Event()
    running = threading.Barrier(9)
    counts = [0] * 8
    errors: list[BaseException] = []

    def work(index: int) -> None:
        try:
            running.wait(10)  # every worker executes while the reloads run, however loaded the machine
            while not counts[index] or not done.is_set():
                assert pipeline.execute(lambda: index) == index
                counts[index] += 1
                time.sleep(0.0005)  # eight busy loops would starve the reloading thread of the GIL
        except BaseException as exc:
            errors.append(exc)

    workers = [threading.Thread(target=work, args=(index,)) for index in range(8)]
    for worker in workers:
        worker.start()
    running.wait(10)
    for _ in range(1000):
        registry.reload("k")
    done.set()
    for worker in workers:
        worker.join(10)
    assert errors == []
    assert all(counts)
    assert len(built) == 1001
    assert len(stopped) == 1000  # every configuration but the one in service
    registry.close()
    assert len(stopped) == 1001
    wait_until(lambda: not any(strategy.thread.is_alive() for strategy in built))


def test_a_store_passed_in_stays_open_after_close() -> None:
    """Closing a pipeline leaves what the user gave it alone: its lock store still serves others."""
    from resilience.stores import MemoryLockStore

    store = MemoryLockStore()
    pipeline = ResiliencePipelineBuilder().add_lock("job", store=store).build()
    assert pipeline.execute(lambda: "first") == "first"
    pipeline.close()
    other = ResiliencePipelineBuilder().add_lock("job", store=store).build()
    assert other.execute(lambda: "second") == "second"
    assert store.acquire("job", "someone", 5) is not None
