"""Stores: leases for the lock strategy and the primitives, and shared circuit state."""

from resilience.stores._memory import MemoryLockStore, MemorySemaphoreStore
from resilience.stores._postgres import PostgresLockStore, PostgresSemaphoreStore
from resilience.stores._protocols import (
    AsyncLockStore,
    AsyncSemaphoreStore,
    AsyncSupportsLeaseInfo,
    AsyncSupportsReleaseNotification,
    AsyncSupportsRenewMany,
    LockStore,
    SemaphoreStore,
    SupportsLeaseInfo,
    SupportsReleaseListener,
    SupportsReleaseNotification,
    SupportsRenewalGroups,
    SupportsRenewMany,
)
from resilience.stores._redis import RedisLockStore, RedisSemaphoreStore
from resilience.stores._redis_circuit import RedisCircuitStateStore
from resilience.stores._redis_client import async_redis_client, redis_client

__all__ = [
    "AsyncLockStore",
    "AsyncSemaphoreStore",
    "AsyncSupportsLeaseInfo",
    "AsyncSupportsReleaseNotification",
    "AsyncSupportsRenewMany",
    "LockStore",
    "MemoryLockStore",
    "MemorySemaphoreStore",
    "PostgresLockStore",
    "PostgresSemaphoreStore",
    "RedisCircuitStateStore",
    "RedisLockStore",
    "RedisSemaphoreStore",
    "SemaphoreStore",
    "SupportsLeaseInfo",
    "SupportsReleaseListener",
    "SupportsReleaseNotification",
    "SupportsRenewMany",
    "SupportsRenewalGroups",
    "async_redis_client",
    "redis_client",
]
