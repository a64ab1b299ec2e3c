"""Redis Cluster with a master stopped: what the lock then does (docs/guarantees.md).

A Cluster of three masters and no replicas, of this test's own. Stopping the master that
serves a lock's key:

- its holder can no longer renew and loses the lease by the local deadline (LockLostError);
- acquiring that key raises the client's error (no lease is granted, nothing is assumed);
- keys on the other masters keep working until the Cluster itself declares the slot range
  down (`cluster-node-timeout`; with the default `cluster-require-full-coverage yes` every key
  then fails) — the lock never grants a lease it could not write;
- the master restarted without persistence rejoins with its slots, empty; the next token of
  the key is higher than every earlier one (seeded from the server clock).
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING

import pytest
import redis
import redis.cluster

from resilience import LockLostError, LockNotAcquiredError, ResiliencePipelineBuilder, get_context
from resilience.stores import RedisLockStore
from tests.lease.health import runtime_report
from tests.redis_support import RedisCluster

if TYPE_CHECKING:
    from collections.abc import Iterator

pytestmark = pytest.mark.redis


@pytest.fixture
def own_cluster() -> Iterator[RedisCluster]:
    cluster = RedisCluster()
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.close()


@pytest.mark.timeout(120)
def test_a_stopped_master_loses_its_leases_and_refuses_new_ones(own_cluster: RedisCluster) -> None:
    client = redis.cluster.RedisCluster(
        host="127.0.0.1", port=own_cluster.port, socket_timeout=2, socket_connect_timeout=1
    )
    store = RedisLockStore(client)
    try:
        key = "cluster-job"
        port = client.get_node_from_key(store.key(key)).port
        node = next(n for n in own_cluster.nodes if n.port == port)
        other = next(
            f"other-{i}" for i in range(1000) if client.get_node_from_key(store.key(f"other-{i}")).port != port
        )
        before = store.acquire(key, "probe", 5)
        assert before is not None
        assert store.release(key, "probe")

        pipeline = ResiliencePipelineBuilder().add_lock(key, ttl=1.5, store=store).build()
        holding = threading.Event()
        lost: list[float] = []
        reason: list[BaseException | None] = []
        report: list[str] = []

        def body() -> None:
            context = get_context()
            assert context is not None
            holding.set()
            if context.signal.wait(timeout=20):
                lost.append(time.monotonic())
            else:
                report.append(runtime_report())  # while the lease is still held
            reason.append(context.signal.reason)

        holder = threading.Thread(target=lambda: pipeline.execute(body))
        holder.start()
        assert holding.wait(10)
        stopped = time.monotonic()
        node.stop()
        # Another master's key is still served right after the stop (before the node timeout).
        token = store.acquire(other, "o", 5)
        assert token is not None
        assert store.release(other, "o")
        holder.join(timeout=60)
        assert lost, "the holder did not notice its master stopped\n" + "\n".join(report)
        assert lost[0] - stopped <= 1.5 + 1.5
        assert isinstance(reason[0], LockLostError)
        # No lease is granted on the stopped master's key: the client's error propagates.
        with pytest.raises(redis.exceptions.RedisError):
            store.acquire(key, "during", 5)
        node.start()  # restarted without persistence: same slots, no data
        deadline = time.monotonic() + 60
        after = None
        while after is None and time.monotonic() < deadline:
            try:
                after = store.acquire(key, "after", 5)
            except (redis.exceptions.RedisError, LockNotAcquiredError):
                time.sleep(0.2)
        assert after is not None
        assert after > before
    finally:
        store.close()
        client.close()
