"""Type-checked, never run: the lock strategy's public API as a user writes it."""

from __future__ import annotations

import datetime as dt
from typing import assert_type

from resilience import (
    LOCK_TOKEN,
    LockLostError,
    LockNotAcquiredError,
    PipelineBuilder,
    ResilienceContext,
    ResiliencePipeline,
    ResiliencePipelineBuilder,
    get_lock_token,
)
from resilience.stores import AsyncLockStore, LockStore, MemoryLockStore, MemorySemaphoreStore
from resilience.strategies import LockEventArguments, LockStrategyOptions, OnLockLostArguments, lock_strategy
from resilience.testing import FakeTimeProvider


def on_lost(arguments: OnLockLostArguments) -> None:
    assert_type(arguments.key, str)
    assert_type(arguments.token, int)
    assert_type(arguments.context, ResilienceContext)


async def on_lost_async(arguments: OnLockLostArguments) -> None:
    return None


def key_of(context: ResilienceContext) -> str:
    return f"order:{context.operation_key}"


def build() -> ResiliencePipeline:
    clock = FakeTimeProvider()
    store: LockStore = MemoryLockStore(clock)
    async_store: AsyncLockStore = MemoryLockStore(clock)
    options = lock_strategy(key_of, ttl=dt.timedelta(seconds=30), wait=1.5, store=async_store, on_lock_lost=on_lost)
    assert_type(options, LockStrategyOptions)
    PipelineBuilder(time_provider=clock).add(options).build()
    return (
        ResiliencePipelineBuilder(name="nightly", time_provider=clock)
        .add_lock("nightly-report", ttl=30, wait=0, store=store, on_lock_lost=on_lost_async, cancel_on_lost=True)
        .add_lock(lambda ctx: f"order:{ctx.operation_key}", name="OrderLock")
        .add_lock("doc", store=store, shared=True)
        .build()
    )


def token_in_body() -> int:
    token = get_lock_token()
    assert_type(token, int | None)
    context = ResilienceContext()
    assert_type(context.properties.get(LOCK_TOKEN), int | None)
    return token or 0


def errors(exc: Exception) -> None:
    if isinstance(exc, LockNotAcquiredError):
        assert_type(exc.key, str)
        assert_type(exc.retry_after, float | None)
    if isinstance(exc, LockLostError):
        assert_type(exc.token, int | None)


def event_arguments(arguments: LockEventArguments) -> float | None:
    return arguments.hold_duration or arguments.wait_duration


def semaphore() -> int | None:
    store = MemorySemaphoreStore()
    return store.acquire("pool", "owner", 30.0, 3)
