"""Network faults between the lock and Redis, through the fault proxy (`faultproxy.py`)."""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING, Any

import pytest
import redis
import redis.backoff
import redis.retry

from resilience import LockLostError, ResiliencePipelineBuilder, get_context
from resilience.stores import RedisLockStore
from resilience.testing import capture_events

if TYPE_CHECKING:
    from collections.abc import Iterator

    from tests.reliability.faultproxy import FaultProxy

pytestmark = pytest.mark.redis

SLACK = 1.0


class Holder:
    """Runs one lock execution in a thread; the body waits on the lease's signal up to `hold` s."""

    def __init__(self, port: int, key: str, *, ttl: float, hold: float) -> None:
        # No client-side retries: what is tested is the lock's own renewal retry.
        no_retry = redis.retry.Retry(redis.backoff.NoBackoff(), 0)
        self.connection = redis.Redis(port=port, socket_timeout=10, socket_connect_timeout=2, retry=no_retry)
        self.store = RedisLockStore(self.connection)
        self.pipeline = ResiliencePipelineBuilder().add_lock(key, ttl=ttl, store=self.store).build()
        self.hold = hold
        self.holding = threading.Event()
        self.lost_at: float | None = None
        self.reason: BaseException | None = None
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run)

    def _run(self) -> None:
        def body() -> None:
            context = get_context()
            assert context is not None
            self.holding.set()
            if context.signal.wait(timeout=self.hold):
                self.lost_at = time.monotonic()
                self.reason = context.signal.reason

        try:
            self.pipeline.execute(body)
        except BaseException as exc:
            self.error = exc

    def warm(self) -> Holder:
        """Connect and cache the scripts first: a cold acquire costs extra round trips (handshake, NOSCRIPT)."""
        assert self.store.acquire("warm-up", "w", 1) is not None
        assert self.store.renew("warm-up", "w", 1)
        assert self.store.release("warm-up", "w")
        # Two open connections: a release may overlap a renewal still in flight, and must not
        # pay a new connection's handshake through the slow link.
        pool = self.connection.connection_pool
        connections = [pool.get_connection() for _ in range(2)]
        for connection in connections:
            connection.connect()
            pool.release(connection)
        return self

    def start(self) -> Holder:
        self.thread.start()
        assert self.holding.wait(10)
        return self

    def join(self) -> None:
        self.thread.join(timeout=30)
        assert not self.thread.is_alive()
        self.store.close()
        self.connection.close()


@pytest.fixture
def events() -> Iterator[list[Any]]:
    with capture_events() as captured:
        yield captured


def _names(events: list[Any]) -> list[str]:
    return [event.name for event in events]


@pytest.mark.timeout(60)
def test_latency_below_a_third_of_the_ttl_causes_no_false_loss(proxy: FaultProxy, uid: str, events: list[Any]) -> None:
    """200 ms each way (RTT 0.4 s < ttl/3 = 0.5 s) for three renewal periods: the lease is kept."""
    holder = Holder(proxy.port, uid, ttl=1.5, hold=2.5).warm()
    proxy.latency = 0.2  # per round trip of a warm connection; a cold one adds handshake and NOSCRIPT trips
    holder.start()
    holder.join()
    assert holder.lost_at is None, holder.reason
    assert holder.error is None
    assert "OnLockLost" not in _names(events)
    assert "OnLockRenewalFailed" not in _names(events)


@pytest.mark.timeout(60)
def test_latency_above_the_ttl_declares_the_loss_by_the_deadline(
    proxy: FaultProxy, uid: str, events: list[Any]
) -> None:
    """Latency 2 s > ttl 1.5 s after the acquire: the signal aborts with LockLostError within ttl of the last renewal."""
    holder = Holder(proxy.port, uid, ttl=1.5, hold=10).start()
    slowed = time.monotonic()
    proxy.latency = 2.0
    try:
        deadline_seen = time.monotonic()
        while holder.lost_at is None and time.monotonic() - deadline_seen < 10:
            time.sleep(0.02)
        assert holder.lost_at is not None
        assert holder.lost_at - slowed <= 1.5 + SLACK
        assert isinstance(holder.reason, LockLostError)
    finally:
        proxy.latency = 0.0
        holder.join()
    assert "OnLockLost" in _names(events)


@pytest.mark.timeout(60)
def test_dropped_connections_report_renewal_failures_and_keep_a_valid_lease(
    proxy: FaultProxy, uid: str, events: list[Any]
) -> None:
    """Connections dropped for 0.9 s of a 3 s ttl: OnLockRenewalFailed is emitted, the lease is kept."""
    holder = Holder(proxy.port, uid, ttl=3.0, hold=4.0).start()
    proxy.mode = "drop"  # the first renewal is due at 1 s and fails until the network is back
    time.sleep(1.4)
    proxy.mode = "pass"
    holder.join()
    assert "OnLockRenewalFailed" in _names(events), _names(events)
    assert holder.lost_at is None, holder.reason
    assert holder.error is None
    assert "OnLockLost" not in _names(events)


@pytest.mark.timeout(60)
def test_a_blackhole_declares_the_loss_within_the_ttl(proxy: FaultProxy, uid: str, events: list[Any]) -> None:
    """Nothing gets through (no error, no reply): the local deadline declares the loss within ttl."""
    holder = Holder(proxy.port, uid, ttl=1.5, hold=10).start()
    cut = time.monotonic()
    proxy.mode = "blackhole"
    try:
        while holder.lost_at is None and time.monotonic() - cut < 10:
            time.sleep(0.02)
        assert holder.lost_at is not None
        assert holder.lost_at - cut <= 1.5 + SLACK
        assert isinstance(holder.reason, LockLostError)
    finally:
        proxy.mode = "drop"
        proxy.mode = "pass"
        holder.join()
    assert "OnLockLost" in _names(events)
