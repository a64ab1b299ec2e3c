"""The shared-holds suite (tests/stores/shared_holds.py) over `RedisLockStore`, standalone and Cluster, both flavours.

The server's clock decides expiry, so the harness sleeps in real time; the queue length is the
number of members of the lock's queue key.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import pytest

from resilience.stores import RedisLockStore
from resilience.stores._redis import companions
from tests.stores.shared_holds import (  # noqa: F401 - fixtures and test classes are collected from here
    SharedHarness,
    TestSharedHolds,
    rw,
    rw_key,
)

if TYPE_CHECKING:
    from collections.abc import Callable

    from tests.redis.conftest import Deployment

pytestmark = pytest.mark.redis


@pytest.fixture
def shared_store_factory(deployment: Deployment) -> Callable[[], SharedHarness]:
    def make() -> SharedHarness:
        client, async_client = deployment.sync_client(), deployment.async_client()
        store = RedisLockStore(client, async_client=async_client, prefix=f"sh{time.monotonic_ns()}")

        def queued(key: str) -> int:
            queue = companions(store.key(key))
            assert queue is not None
            return int(client.zcard(queue[0]))

        closers: list[Any] = [store.close, client.close]
        return SharedHarness(store, time.sleep, queued, real_time=True, closers=closers)

    return make


def test_no_key_of_a_shared_hold_is_left_without_an_expiry(deployment: Deployment) -> None:
    """Shared holders, a queued writer and a queued reader: every key of the lock has an expiry, held or released."""
    client = deployment.sync_client()
    prefix = f"shx{time.monotonic_ns()}"
    store = RedisLockStore(client, prefix=prefix)
    try:
        assert store.acquire_shared("k", "r1", 30) is not None
        assert store.acquire_shared("k", "r2", 30) is not None
        assert store.acquire_or_queue("k", "w", 30)[0] is None  # waits for the readers
        assert store.acquire_or_queue("k", "r3", 30, shared=True)[0] is None  # waits behind the writer
        assert store.renew("k", "r1", 40) is True

        def keys() -> list[Any]:
            nodes = client.get_nodes() if deployment.cluster else [None]
            found: list[Any] = []
            for node in nodes:
                scan = (
                    client.scan_iter(match=f"*{prefix}*", target_nodes=node)
                    if node
                    else client.scan_iter(f"*{prefix}*")
                )
                found.extend(scan)
            return found

        held = keys()
        assert len(held) >= 4
        assert all(client.pttl(name) > 0 for name in held), {name: client.pttl(name) for name in held}
        assert store.release("k", "r1") is True
        assert store.release("k", "r2") is True  # the last reader out hands the lock to the writer
        assert store.acquire_or_queue("k", "w", 30)[0] is not None
        assert store.release("k", "w") is True  # the writer hands it to the queued reader
        assert store.acquire_or_queue("k", "r3", 30, shared=True)[0] is not None
        assert store.release("k", "r3") is True
        assert all(client.pttl(name) > 0 for name in keys())
    finally:
        store.close()
        client.close()
