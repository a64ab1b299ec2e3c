"""Stores: leases for the lock strategy and the primitives, and shared circuit state."""

from resilience.stores._info import HolderInfo, LockInfo
from resilience.stores._memory import MemoryLockStore, MemorySemaphoreStore
from resilience.stores._postgres import PostgresLockStore, PostgresSemaphoreStore
from resilience.stores._protocols import (
    AsyncLockStore,
    AsyncSemaphoreStore,
    AsyncSupportsInspection,
    AsyncSupportsLeaseInfo,
    AsyncSupportsPermits,
    AsyncSupportsReleaseNotification,
    AsyncSupportsRenewMany,
    AsyncSupportsSharedHolds,
    DeclaresCapabilities,
    LockStore,
    SemaphoreStore,
    StoreCapabilities,
    SupportsInspection,
    SupportsLeaseInfo,
    SupportsPermits,
    SupportsReleaseListener,
    SupportsReleaseNotification,
    SupportsRenewalGroups,
    SupportsRenewMany,
    SupportsSharedHolds,
    serves,
)
from resilience.stores._redis import RedisLockStore, RedisSemaphoreStore
from resilience.stores._redis_circuit import RedisCircuitStateStore
from resilience.stores._redis_client import async_redis_client, redis_client

__all__ = [
    "AsyncLockStore",
    "AsyncSemaphoreStore",
    "AsyncSupportsInspection",
    "AsyncSupportsLeaseInfo",
    "AsyncSupportsPermits",
    "AsyncSupportsReleaseNotification",
    "AsyncSupportsRenewMany",
    "AsyncSupportsSharedHolds",
    "DeclaresCapabilities",
    "HolderInfo",
    "LockInfo",
    "LockStore",
    "MemoryLockStore",
    "MemorySemaphoreStore",
    "PostgresLockStore",
    "PostgresSemaphoreStore",
    "RedisCircuitStateStore",
    "RedisLockStore",
    "RedisSemaphoreStore",
    "SemaphoreStore",
    "StoreCapabilities",
    "SupportsInspection",
    "SupportsLeaseInfo",
    "SupportsPermits",
    "SupportsReleaseListener",
    "SupportsReleaseNotification",
    "SupportsRenewMany",
    "SupportsRenewalGroups",
    "SupportsSharedHolds",
    "async_redis_client",
    "redis_client",
    "serves",
]
