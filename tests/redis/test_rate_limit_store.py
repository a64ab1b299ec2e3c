"""RedisRateLimitStore on a real server and a real Cluster, sync and async."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import TYPE_CHECKING, Any

import pytest

from resilience import RateLimiterRejectedError, ResiliencePipelineBuilder, ValidationError
from resilience.limiters import AsyncRateLimitStore, RateLimitStore, RedisRateLimitStore
from resilience.limiters._redis_scripts import SCRIPTS
from resilience.stores import serves

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from conftest import Deployment

pytestmark = pytest.mark.redis

ALGORITHMS = ["token_bucket", "sliding_window", "fixed_window"]


class Limits:
    """One store driven through `take` or `take_async`, always awaited by the test."""

    def __init__(self, store: RedisRateLimitStore, *, is_async: bool) -> None:
        self.store = store
        self.is_async = is_async

    async def take(self, *args: Any) -> float:
        if self.is_async:
            return await self.store.take_async(*args)
        return self.store.take(*args)


@pytest.fixture(params=["sync", "async"])
async def limits(request: pytest.FixtureRequest, sync_redis: Any, async_redis: Any) -> AsyncIterator[Limits]:
    is_async = request.param == "async"
    store = RedisRateLimitStore(async_client=async_redis) if is_async else RedisRateLimitStore(sync_redis)
    yield Limits(store, is_async=is_async)
    await store.aclose()


def test_offers_the_protocols_it_has_clients_for(sync_redis: Any, async_redis: Any) -> None:
    """Both clients: both protocols; one client: only its protocol (the other flavour refuses)."""
    both = RedisRateLimitStore(sync_redis, async_client=async_redis)
    assert serves(both, RateLimitStore)
    assert serves(both, AsyncRateLimitStore)
    sync_only = RedisRateLimitStore(sync_redis)
    assert serves(sync_only, RateLimitStore)
    assert not serves(sync_only, AsyncRateLimitStore)
    async_only = RedisRateLimitStore(async_client=async_redis)
    assert not serves(async_only, RateLimitStore)
    assert isinstance(async_only, RedisRateLimitStore)
    assert "RedisRateLimitStore" in repr(both)
    with pytest.raises(ValidationError):
        RedisRateLimitStore()


@pytest.mark.parametrize("algorithm", ALGORITHMS)
async def test_limit_then_exact_retry_after(limits: Limits, key: str, algorithm: str) -> None:
    """Five per 10 s: five granted, the sixth told how long (server clock, whole µs, rounded up)."""
    started = time.monotonic()
    assert [await limits.take(key, 5, 10.0, None, algorithm) for _ in range(5)] == [0.0] * 5
    wait = await limits.take(key, 5, 10.0, None, algorithm)
    elapsed = time.monotonic() - started
    expected = 2.0 if algorithm == "token_bucket" else 10.0
    assert expected - elapsed - 0.01 <= wait <= expected + 1e-6
    assert await limits.take(f"{key}:other", 5, 10.0, None, algorithm) == 0.0


async def test_token_bucket_burst_and_permits(limits: Limits, key: str) -> None:
    """burst caps the back-to-back run; several permits cost several intervals."""
    assert await limits.take(key, 10, 1.0, 3, "token_bucket", 3) == 0.0
    wait = await limits.take(key, 10, 1.0, 3, "token_bucket", 2)
    assert 0.1 < wait <= 0.2 + 1e-6


async def test_permits_become_free_after_the_retry_after(limits: Limits, key: str) -> None:
    """Waiting the retry-after told is enough (to the microsecond, on the server's clock)."""
    for algorithm in ALGORITHMS:
        partition = f"{key}:{algorithm}"
        assert await limits.take(partition, 2, 0.2, None, algorithm) == 0.0
        assert await limits.take(partition, 2, 0.2, None, algorithm) == 0.0
        wait = await limits.take(partition, 2, 0.2, None, algorithm)
        assert wait > 0
        await asyncio.sleep(wait + 0.002)
        assert await limits.take(partition, 2, 0.2, None, algorithm) == 0.0, algorithm


@pytest.mark.parametrize("algorithm", ALGORITHMS)
async def test_every_key_expires(limits: Limits, sync_redis: Any, key: str, algorithm: str) -> None:
    """One key per partition, `<prefix>:<algorithm>:<key>`, always with an expiry."""
    await limits.take(key, 3, 5.0, None, algorithm)
    name = limits.store.key(key, algorithm)
    assert name == f"ratelimit:{algorithm}:{key}"
    assert sync_redis.exists(name) == 1
    assert 0 < sync_redis.pttl(name) <= 5000


async def test_a_fractional_interval_is_kept_exactly(limits: Limits, sync_redis: Any, key: str) -> None:
    """3 per second: 333333.33 µs per permit; the stored time round-trips and waits stay consistent."""
    started = time.monotonic()
    assert [await limits.take(key, 3, 1.0) for _ in range(3)] == [0.0] * 3
    stored = float(sync_redis.get(limits.store.key(key)))
    assert stored > 1.6e15
    wait = await limits.take(key, 3, 1.0)
    elapsed = time.monotonic() - started
    assert 1 / 3 - elapsed - 0.001 < wait <= 0.333334


async def test_recovers_from_noscript(limits: Limits, deployment: Deployment, key: str) -> None:
    """After SCRIPT FLUSH the next decision still works (EVAL once, then EVALSHA again)."""
    await limits.take(key, 2, 1.0)
    deployment.script_flush()
    assert await limits.take(key, 2, 1.0) == 0.0
    assert await limits.take(key, 2, 1.0) > 0


async def test_bad_arguments_are_refused_before_any_round_trip(limits: Limits, key: str) -> None:
    """ValidationError for arguments that can never be granted; nothing is sent."""
    for arguments in [(key, 0, 1.0), (key, 1, 0.0), (key, 2, 1.0, 1, "token_bucket", 2), (key, 1, 1.0, None, "x")]:
        with pytest.raises(ValidationError):
            await limits.take(*arguments)
    with pytest.raises(ValidationError):
        await limits.take(3, 1, 1.0)


def test_missing_flavour_says_which_client_to_pass(sync_redis: Any, async_redis: Any) -> None:
    """Calling the flavour without a client names the client to pass."""
    with pytest.raises(ValidationError, match="needs a sync client"):
        RedisRateLimitStore(async_client=async_redis)._sync_runner("take")


def test_threads_never_over_admit(deployment: Deployment, key: str) -> None:
    """Eight threads with their own clients on one partition of 30 per day: exactly 30 granted, per algorithm."""
    # A day, not a minute: the token bucket earns a permit every period / 30 (2 s for a minute,
    # which a loaded machine's 288 calls can outlast, and the 31st grant is then right).
    granted = dict.fromkeys(ALGORITHMS, 0)
    errors: list[Exception] = []
    lock = threading.Lock()

    def hammer() -> None:
        client = deployment.sync_client(socket_timeout=30)
        store = RedisRateLimitStore(client)
        try:
            for _ in range(12):
                for algorithm in ALGORITHMS:
                    if store.take(key, 30, 86400.0, None, algorithm) == 0.0:  # type: ignore[arg-type]
                        with lock:
                            granted[algorithm] += 1
        except Exception as exc:  # a loaded machine: reported, never counted as a grant
            errors.append(exc)
        finally:
            client.close()

    threads = [threading.Thread(target=hammer) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert errors == []
    assert granted == dict.fromkeys(ALGORITHMS, 30)


async def test_the_strategy_over_redis(sync_redis: Any, async_redis: Any, key: str) -> None:
    """A pipeline shares its limit through Redis, from sync and async executions alike."""
    store = RedisRateLimitStore(sync_redis, async_client=async_redis)
    pipeline = ResiliencePipelineBuilder().add_rate_limiter(2, per=30, key=key, store=store).build()
    started = time.monotonic()
    assert pipeline.execute(lambda: 1) == 1

    async def one() -> int:
        return 2

    assert await pipeline.execute_async(one) == 2
    with pytest.raises(RateLimiterRejectedError) as caught:
        pipeline.execute(lambda: 3)
    assert caught.value.key == key
    # One permit comes back 15 s after the first was taken: the wait left is 15 s less the time
    # the three calls took (seconds on a loaded machine with a Cluster, not a fixed 1 s).
    elapsed = time.monotonic() - started
    assert 15 - elapsed - 0.05 < (caught.value.retry_after or 0) <= 15


def test_scripts_touch_one_key_and_read_only_the_server_clock() -> None:
    """Each script uses KEYS[1] only, reads TIME, and formats no number as text."""
    for script in SCRIPTS.values():
        assert "KEYS[2]" not in script.source
        assert "redis.call('TIME')" in script.source
        assert "tostring" not in script.source
        assert ".." not in script.source.replace("...", "")
        assert "cjson" not in script.source
