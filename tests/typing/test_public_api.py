"""Type-checked, never run: the public API as a user writes it (mypy --strict and pyright)."""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any, assert_type

from resilience import Err, Ok, Outcome, ResiliencePipeline, ResiliencePipelineBuilder


def build() -> ResiliencePipeline:
    return ResiliencePipelineBuilder(name="typed").build()


def charge(order_id: str, *, amount: int) -> float:
    return amount / 100


async def acharge(order_id: str, *, amount: int) -> float:
    return amount / 100


def sync_use(pipeline: ResiliencePipeline) -> None:
    assert_type(pipeline.execute(charge, "o-1", amount=5), float)
    outcome = pipeline.settle(charge, "o-1", amount=5)
    assert_type(outcome, Ok[float] | Err)
    widened: Outcome[float] = outcome
    assert_type(widened.value, float | None)
    assert_type(outcome.match(ok=lambda v: f"{v:.2f}", err=lambda e: type(e).__name__), str)
    match outcome:
        case Ok(value):
            assert_type(value, float)
        case Err(error):
            assert_type(error, Exception)


async def async_use(pipeline: ResiliencePipeline) -> None:
    assert_type(await pipeline.execute_async(acharge, "o-1", amount=5), float)
    outcome = await pipeline.settle_async(acharge, "o-1", amount=5)
    assert_type(outcome, Ok[float] | Err)
    assert_type(outcome.unwrap(), float)


def decorated(pipeline: ResiliencePipeline) -> None:
    @pipeline
    def sync_fn(x: int, y: str = "") -> list[int]:
        return [x]

    @pipeline
    async def async_fn(x: int) -> bytes:
        return b""

    assert_type(sync_fn(1, y="a"), list[int])

    coroutine_function: Callable[[int], Coroutine[Any, Any, bytes]] = async_fn
    del coroutine_function
