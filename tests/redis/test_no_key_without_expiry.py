"""The acquire scripts check the ttl before they write: no key is ever left without an expiry."""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

import pytest
import redis

from resilience import ValidationError
from resilience.primitives import lock, semaphore
from resilience.stores import RedisLockStore, RedisSemaphoreStore
from resilience.stores._redis_scripts import LOCK_ACQUIRE, SEMAPHORE_ACQUIRE

if TYPE_CHECKING:
    from tests.redis_support import RedisServer

pytestmark = pytest.mark.redis

HUGE_MS = 9_200_000_000_000_000_000  # PEXPIRE refuses it: now + ttl overflows


@pytest.fixture
def client(redis_server: RedisServer) -> redis.Redis:
    client = redis.Redis(port=redis_server.port)
    yield client  # type: ignore[misc]
    client.close()


def test_the_lock_script_refuses_a_ttl_pexpire_would_refuse_and_writes_nothing(client: redis.Redis) -> None:
    key = f"lock:{uuid.uuid4().hex}"
    with pytest.raises(redis.ResponseError, match="ttl"):
        client.eval(LOCK_ACQUIRE.source, 1, key, "owner", HUGE_MS)
    assert client.exists(key) == 0


def test_the_semaphore_script_refuses_a_ttl_pexpire_would_refuse_and_writes_nothing(client: redis.Redis) -> None:
    base = f"{{semaphore:{uuid.uuid4().hex}}}"
    with pytest.raises(redis.ResponseError, match="ttl"):
        client.eval(SEMAPHORE_ACQUIRE.source, 2, base, base + ":tokens", "owner", HUGE_MS, 1, 60_000)
    assert client.exists(base, base + ":tokens") == 0


@pytest.mark.parametrize("kind", ["lock", "semaphore"])
def test_the_stores_refuse_a_huge_ttl_before_sending(client: redis.Redis, kind: str) -> None:
    key = uuid.uuid4().hex
    if kind == "lock":
        with pytest.raises(ValidationError, match="ttl"):
            RedisLockStore(client).acquire(key, "owner", 9.2e15)
    else:
        with pytest.raises(ValidationError, match="ttl"):
            RedisSemaphoreStore(client).acquire(key, "owner", 9.2e15, 1)
    assert client.keys(f"*{key}*") == []


def test_a_pipeline_is_not_a_client(client: redis.Redis) -> None:
    with pytest.raises(ValidationError, match="pipeline"):
        RedisLockStore(client.pipeline())
    with pytest.raises(ValidationError, match="pipeline"):
        lock(client.pipeline())
    with pytest.raises(ValidationError, match="pipeline"):
        semaphore(client.pipeline(), limit=2)
