"""Stores over the session's throwaway PostgreSQL cluster (tests/postgres_support.py)."""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

import pytest

from resilience.stores import PostgresLockStore, PostgresSemaphoreStore

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from tests.postgres_support import PostgresServer


@pytest.fixture(scope="session")
def postgres_dsn(postgres_server: PostgresServer) -> str:
    """The session cluster's DSN, with the default tables created."""
    with PostgresLockStore(postgres_server.dsn) as locks, PostgresSemaphoreStore(postgres_server.dsn) as semaphores:
        locks.create_schema()
        semaphores.create_schema()
    return postgres_server.dsn


@pytest.fixture
def pg_key() -> str:
    """A key no other test uses."""
    return f"test:{uuid.uuid4().hex}"


@pytest.fixture
async def made_stores() -> AsyncIterator[list[Any]]:
    """The stores a test made, closed after it."""
    stores: list[Any] = []
    yield stores
    for store in stores:
        await store.aclose()


@pytest.fixture
async def pg_locks(postgres_dsn: str, made_stores: list[Any]) -> PostgresLockStore:
    """A lock store on the session cluster (both flavours), closed after the test."""
    store = PostgresLockStore(postgres_dsn)
    made_stores.append(store)
    return store


@pytest.fixture
async def pg_semaphores(postgres_dsn: str, made_stores: list[Any]) -> PostgresSemaphoreStore:
    """A semaphore store on the session cluster (both flavours), closed after the test."""
    store = PostgresSemaphoreStore(postgres_dsn)
    made_stores.append(store)
    return store
