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


def keyed(pipeline: ResiliencePipeline) -> None:
    @pipeline(operation_key="order_id")
    def charge_order(order_id: str, amount: int) -> float:
        return amount / 100

    @pipeline(operation_key="order_id")
    async def acharge_order(order_id: str) -> bytes:
        return b""

    assert_type(charge_order("o-1", 5), float)
    coroutine_function: Callable[[str], Coroutine[Any, Any, bytes]] = acharge_order
    del coroutine_function

    def tenant_order(tenant: str, order_id: int) -> str:
        return f"{tenant}/{order_id}"

    @pipeline(operation_key=tenant_order)
    def refund(tenant: str, order_id: int) -> bool:
        return True

    assert_type(refund("acme", 42), bool)

    # A key function that does not take the decorated function's parameters is a type error.
    @pipeline(operation_key=tenant_order)  # type: ignore[arg-type]  # pyright: ignore[reportArgumentType, reportUntypedFunctionDecorator]
    def mismatched(order_id: str) -> None: ...


def outcome_functions(pipeline: ResiliencePipeline) -> None:
    def charge_value(order_id: str) -> Ok[int] | Err:
        return Ok(len(order_id))

    outcome = pipeline.execute_outcome(charge_value, "o-1")
    assert_type(outcome, Ok[int] | Err)
    assert_type(outcome.value_or(0), int)
    assert_type(outcome.map(str), Ok[str] | Err)
    assert_type(Err(ValueError()).value_or("d"), str)


async def async_outcome_functions(pipeline: ResiliencePipeline) -> None:
    async def quote(symbol: str) -> Outcome[float]:
        return Ok(1.0)

    outcome = await pipeline.execute_outcome_async(quote, "X")
    assert_type(outcome, Ok[float] | Err)
