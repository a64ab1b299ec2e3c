"""Stores for the primitives' tests on every backend: memory, Redis standalone and Cluster, PostgreSQL."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pytest
import redis
import redis.asyncio
import redis.asyncio.cluster
import redis.cluster

from resilience.primitives import lock, semaphore
from resilience.stores import (
    MemoryLockStore,
    MemorySemaphoreStore,
    PostgresLockStore,
    PostgresSemaphoreStore,
    RedisLockStore,
    RedisSemaphoreStore,
)

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from resilience.primitives import Locks, Semaphores


@dataclass
class Backend:
    """One store kind behind a lock and a semaphore primitive (both flavours)."""

    name: str
    lock_store: Any
    semaphore_store: Any

    @property
    def records_waiters(self) -> bool:
        """Whether the lock store keeps its waiters' queue (every lock store does)."""
        return True

    @property
    def semaphore_records_waiters(self) -> bool:
        """Whether the semaphore store keeps its waiters' queue (PostgreSQL's does not)."""
        return self.name != "postgres"

    def locks(self, **options: Any) -> Locks:
        return lock(self.lock_store, prefix="insp", **options)

    def semaphores(self, limit: int, **options: Any) -> Semaphores:
        return semaphore(self.semaphore_store, limit=limit, prefix="insp", **options)

    def queue_lock(self, key: str, owner: str) -> None:
        """`owner` joins the lock's waiter queue (as a waiting `acquire` does)."""
        assert self.lock_store.acquire_or_queue(f"insp:{key}", owner, 30)[0] is None

    def queue_semaphore(self, key: str, owner: str, limit: int) -> None:
        assert self.semaphore_store.acquire_or_queue(f"insp:{key}", owner, 30, limit)[0] is None


@pytest.fixture(params=["memory", "redis", "cluster", "postgres"])
async def backend(request: pytest.FixtureRequest) -> AsyncIterator[Backend]:
    kind = request.param
    if kind == "memory":
        yield Backend(kind, MemoryLockStore(), MemorySemaphoreStore())
        return
    if kind == "postgres":
        dsn = request.getfixturevalue("postgres_server").dsn
        table = f"insp_{uuid.uuid4().hex[:8]}"
        locks, semaphores = PostgresLockStore(dsn, table=table), PostgresSemaphoreStore(dsn, table=f"{table}_s")
        await locks.create_schema_async()
        await semaphores.create_schema_async()
        yield Backend(kind, locks, semaphores)
        await locks.aclose()
        await semaphores.aclose()
        return
    if kind == "cluster":
        port = request.getfixturevalue("redis_cluster").port
        sync: Any = redis.cluster.RedisCluster(host="127.0.0.1", port=port)
        aio: Any = redis.asyncio.cluster.RedisCluster(host="127.0.0.1", port=port)
    else:
        server = request.getfixturevalue("redis_server")
        sync = redis.Redis(host=server.host, port=server.port)
        aio = redis.asyncio.Redis(host=server.host, port=server.port)
    prefix = f"t{uuid.uuid4().hex[:8]}"
    locks_r = RedisLockStore(sync, async_client=aio, prefix=prefix)
    semaphores_r = RedisSemaphoreStore(sync, async_client=aio, prefix=prefix)
    yield Backend(kind, locks_r, semaphores_r)
    await locks_r.aclose()
    await semaphores_r.aclose()
    sync.close()
    await aio.aclose()
