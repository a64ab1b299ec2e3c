"""Lease stores for the lock strategy and the primitives: protocols and implementations."""

from resilience.stores._memory import MemoryLockStore, MemorySemaphoreStore
from resilience.stores._postgres import PostgresLockStore, PostgresSemaphoreStore
from resilience.stores._protocols import (
    AsyncLockStore,
    AsyncSemaphoreStore,
    AsyncSupportsLeaseInfo,
    AsyncSupportsReleaseNotification,
    LockStore,
    SemaphoreStore,
    SupportsLeaseInfo,
    SupportsReleaseListener,
    SupportsReleaseNotification,
)
from resilience.stores._redis import RedisLockStore, RedisSemaphoreStore

__all__ = [
    "AsyncLockStore",
    "AsyncSemaphoreStore",
    "AsyncSupportsLeaseInfo",
    "AsyncSupportsReleaseNotification",
    "LockStore",
    "MemoryLockStore",
    "MemorySemaphoreStore",
    "PostgresLockStore",
    "PostgresSemaphoreStore",
    "RedisLockStore",
    "RedisSemaphoreStore",
    "SemaphoreStore",
    "SupportsLeaseInfo",
    "SupportsReleaseListener",
    "SupportsReleaseNotification",
]
