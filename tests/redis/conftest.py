"""Clients and stores over the throwaway servers, for each deployment (standalone, Cluster)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pytest
import redis
import redis.asyncio
import redis.asyncio.cluster
import redis.cluster

from resilience.stores import RedisLockStore, RedisSemaphoreStore

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Iterator

    from tests.redis_support import RedisCluster, RedisServer


@dataclass
class Deployment:
    """Where the tests connect: a standalone server or a Cluster."""

    name: str
    host: str
    port: int
    cluster: bool
    server: RedisServer | RedisCluster

    def sync_client(self, **options: Any) -> Any:
        if self.cluster:
            return redis.cluster.RedisCluster(host=self.host, port=self.port, **options)
        return redis.Redis(host=self.host, port=self.port, **options)

    def async_client(self, **options: Any) -> Any:
        if self.cluster:
            return redis.asyncio.cluster.RedisCluster(host=self.host, port=self.port, **options)
        return redis.asyncio.Redis(host=self.host, port=self.port, **options)

    def script_flush(self) -> None:
        """SCRIPT FLUSH on every node: the next EVALSHA answers NOSCRIPT."""
        servers = self.server.nodes if self.cluster else [self.server]  # type: ignore[union-attr]
        for server in servers:
            assert server.command("SCRIPT", "FLUSH").startswith("+OK")

    def flushall(self) -> None:
        self.server.flushall()


@pytest.fixture(params=["standalone", "cluster"])
def deployment(request: pytest.FixtureRequest) -> Deployment:
    """Each Redis test runs on a standalone server and on a 3-master Cluster."""
    if request.param == "cluster":
        cluster: RedisCluster = request.getfixturevalue("redis_cluster")
        return Deployment("cluster", "127.0.0.1", cluster.port, cluster=True, server=cluster)
    server: RedisServer = request.getfixturevalue("redis_server")
    return Deployment("standalone", server.host, server.port, cluster=False, server=server)


@pytest.fixture
def sync_redis(deployment: Deployment) -> Iterator[Any]:
    """A sync client of the deployment (also used to inspect keys)."""
    client = deployment.sync_client()
    yield client
    client.close()


@pytest.fixture
async def async_redis(deployment: Deployment) -> AsyncIterator[Any]:
    """An asyncio client of the deployment."""
    client = deployment.async_client()
    yield client
    await client.aclose()


@pytest.fixture
def key() -> str:
    """A key no other test uses."""
    return f"test:{uuid.uuid4().hex}"


class Flavour:
    """One store driven through its sync or its async methods, always awaited by the test."""

    def __init__(self, store: Any, *, is_async: bool) -> None:
        self.store = store
        self.is_async = is_async

    async def call(self, name: str, *args: Any) -> Any:
        if self.is_async:
            return await getattr(self.store, f"{name}_async")(*args)
        return getattr(self.store, name)(*args)

    async def acquire(self, *args: Any) -> Any:
        return await self.call("acquire", *args)

    async def acquire_or_ttl(self, *args: Any) -> Any:
        return await self.call("acquire_or_ttl", *args)

    async def renew(self, *args: Any) -> Any:
        return await self.call("renew", *args)

    async def release(self, *args: Any) -> Any:
        return await self.call("release", *args)

    async def wait_released(self, *args: Any) -> Any:
        return await self.call("wait_released", *args)


@pytest.fixture(params=["sync", "async"])
async def locks(request: pytest.FixtureRequest, sync_redis: Any, async_redis: Any) -> AsyncIterator[Flavour]:
    """A `RedisLockStore`, driven sync or async."""
    is_async = request.param == "async"
    store = RedisLockStore(async_client=async_redis) if is_async else RedisLockStore(sync_redis)
    yield Flavour(store, is_async=is_async)
    await store.aclose()


@pytest.fixture(params=["sync", "async"])
async def semaphores(request: pytest.FixtureRequest, sync_redis: Any, async_redis: Any) -> AsyncIterator[Flavour]:
    """A `RedisSemaphoreStore`, driven sync or async."""
    is_async = request.param == "async"
    store = RedisSemaphoreStore(async_client=async_redis) if is_async else RedisSemaphoreStore(sync_redis)
    yield Flavour(store, is_async=is_async)
    await store.aclose()
