"""The rate limiter across processes: 4 processes x 2 threads on one Redis partition, 50 per second.

No interval ever holds more grants than the algorithm allows, and at least 98% of what it
allows is granted (see `ratelimit_exactness.py` for how grants are timed and checked).
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

import pytest

from tests.reliability.ratelimit_exactness import run

if TYPE_CHECKING:
    from tests.redis_support import RedisServer

pytestmark = [pytest.mark.redis, pytest.mark.slow]


@pytest.mark.parametrize("algorithm", ["token_bucket", "sliding_window", "fixed_window"])
def test_exact_across_processes(redis_server: RedisServer, algorithm: str) -> None:
    """2.5 s per algorithm: never over the bound, at least 98% of it used.

    Over-admission fails at once. A run that used less than 98% is run once more before
    failing: on a machine loaded by other test suites a worker process can be left unscheduled
    for longer than the period, so permits free up with nobody asking (`make soak` runs the
    10 s version without a second chance).
    """
    for attempt in range(2):
        report = run(redis_server.port, f"exact:{uuid.uuid4().hex}", algorithm, seconds=2.5)
        assert not report.over_admitted, report.summary()
        assert report.refusals > 0, "the limit was never contended"
        if report.utilization >= 0.98 or attempt == 1:
            break
    assert report.utilization >= 0.98, report.summary()


@pytest.mark.soak
@pytest.mark.parametrize("algorithm", ["token_bucket", "sliding_window", "fixed_window"])
def test_exact_across_processes_for_ten_seconds(redis_server: RedisServer, algorithm: str) -> None:
    """The issue's run: 10 s, 4 processes x 2 threads, limit 50/s."""
    report = run(redis_server.port, f"exact:{uuid.uuid4().hex}", algorithm, seconds=10.0)
    print(report.summary())  # noqa: T201 - make soak shows the numbers
    assert not report.over_admitted, report.summary()
    assert report.utilization >= 0.98, report.summary()
