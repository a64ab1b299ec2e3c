"""Shared fixtures: a fake clock per test."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
from hypothesis import HealthCheck, settings

from resilience.testing import FakeTimeProvider
from tests.lease.health import scheduler_problem

if TYPE_CHECKING:
    from collections.abc import Iterator

# Hypothesis's timing checks judge the machine, not the property: on two shared cores one draw
# can stall for a second (seen at load 12: `too_slow` after 3 inputs). Properties keep their
# example counts; only the wall-clock checks are off.
settings.register_profile("suite", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("suite")


@pytest.fixture(autouse=True)
def _lease_scheduler_keeps_its_timer() -> Iterator[None]:
    """No test may leave the sync lease runtime asleep past its next event (see `scheduler_problem`)."""
    yield
    problem = scheduler_problem()
    assert problem is None, problem


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
