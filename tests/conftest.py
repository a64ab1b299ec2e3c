"""Shared fixtures: a fake clock per test."""

from __future__ import annotations

import pytest

from resilience.testing import FakeTimeProvider


@pytest.fixture
def clock() -> FakeTimeProvider:
    """A fake clock that moves only when a test advances it."""
    return FakeTimeProvider(seed=1234)


@pytest.fixture
def auto_clock() -> FakeTimeProvider:
    """A fake clock that moves by whatever is slept on it."""
    return FakeTimeProvider(auto_advance=True, seed=1234)


# Redis: throwaway redis-server processes started by the tests (tests/redis_support.py).
# PostgreSQL: throwaway clusters started by the tests (tests/postgres_support.py).
from tests.postgres_support import fresh_postgres_server, postgres_server  # noqa: E402
from tests.redis_support import fresh_redis_server, redis_cluster, redis_server  # noqa: E402

__all__ = [
    "auto_clock",
    "clock",
    "fresh_postgres_server",
    "fresh_redis_server",
    "postgres_server",
    "redis_cluster",
    "redis_server",
]
