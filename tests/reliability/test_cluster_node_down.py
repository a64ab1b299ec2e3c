"""One hung or dead Cluster master fails only its own leases (docs/guarantees.md, Cluster node down).

Three masters, no replicas, of this test's own; 30 sync leases held at once, each by a thread of
its own (not nested: a hold inside another is aborted with it), their renewals batched together
by the lease runtime; one master frozen (`SIGSTOP`) or killed
(`SIGKILL`). Over 3x the ttl — before the Cluster itself declares the slot range down
(`cluster-node-timeout`, 60 s in this test) — every lease on a healthy master is kept, and
every lease on the bad one is lost by its deadline.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from typing import TYPE_CHECKING, Any

import pytest
import redis.cluster

from resilience.primitives import lock
from tests.redis_support import RedisCluster

if TYPE_CHECKING:
    from collections.abc import Iterator

pytestmark = pytest.mark.redis

TTL = 1.2
LEASES = 30


@pytest.fixture
def own_cluster() -> Iterator[RedisCluster]:
    cluster = RedisCluster()
    try:
        cluster.start()
        # The Cluster must not declare the bad master down (and itself with it: no replicas)
        # while the test watches, however slowly a loaded machine runs it.
        for host, port in cluster.startup_nodes:
            with redis.Redis(host=host, port=port) as node:
                node.config_set("cluster-node-timeout", 60_000)
        yield cluster
    finally:
        for node in cluster.nodes:  # a frozen node must be thawed to be stopped
            process = node._process
            if process is not None and process.poll() is None:
                os.kill(process.pid, signal.SIGCONT)
        cluster.close()


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    ("fault", "socket_timeout"),
    [("SIGSTOP", 0.5), ("SIGKILL", 0.5), ("SIGSTOP", None)],
    ids=["SIGSTOP", "SIGKILL", "SIGSTOP-no-socket-timeout"],
)
def test_one_bad_master_costs_no_lease_on_the_healthy_masters(
    own_cluster: RedisCluster, fault: str, socket_timeout: float | None
) -> None:
    """`socket_timeout=None` (redis-py's default): a call to the frozen master never returns."""
    client = redis.cluster.RedisCluster(
        startup_nodes=[redis.cluster.ClusterNode(host, port) for host, port in own_cluster.startup_nodes],
        socket_timeout=socket_timeout,
        socket_connect_timeout=0.5,
    )
    locks = lock(client, ttl=TTL)
    keys = [f"job-{n}" for n in range(LEASES)]
    node_of = {key: client.get_node_from_key(f"lock:{key}").port for key in keys}
    bad = own_cluster.nodes[0]
    assert bad.port in node_of.values()
    assert len(set(node_of.values())) == 3
    handles: dict[str, Any] = {}
    holding = threading.Semaphore(0)
    done = threading.Event()

    def hold(key: str) -> None:
        with contextlib.suppress(Exception), locks.hold(key) as handle:  # a lost lease's hold raises
            handles[key] = handle
            holding.release()
            done.wait(30)

    holders = [threading.Thread(target=hold, args=(key,), daemon=True) for key in keys]
    try:
        for thread in holders:
            thread.start()
        for _ in keys:
            assert holding.acquire(timeout=10)
        time.sleep(TTL)  # a few renewals while healthy
        process = bad._process
        assert process is not None
        os.kill(process.pid, getattr(signal, fault))
        stopped = time.monotonic()
        time.sleep(3 * TTL)
        watched = time.monotonic() - stopped
        lost_healthy = sorted(k for k in keys if node_of[k] != bad.port and handles[k].signal.aborted)
        lost_bad = sorted(k for k in keys if node_of[k] == bad.port and handles[k].signal.aborted)
        on_bad = sum(1 for k in keys if node_of[k] == bad.port)
        print(  # noqa: T201 - for the report (pytest -s)
            f"{fault}: over {watched:.1f} s, lost on healthy masters {len(lost_healthy)}/{LEASES - on_bad}, "
            f"on the bad one {len(lost_bad)}/{on_bad}"
        )
        if fault == "SIGSTOP":
            os.kill(process.pid, signal.SIGCONT)
        assert watched < 4.5, "the window reached the Cluster's own node timeout: the test says nothing"
        assert lost_healthy == [], f"leases lost on healthy masters: {lost_healthy}"
        assert len(lost_bad) == on_bad, "a lease on the bad master was not declared lost"
    finally:
        done.set()
        for thread in holders:
            thread.join(10)
        client.close()
