"""The primitives on a real redis-server (started by the tests): across clients, threads and tasks."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from typing import TYPE_CHECKING, Any

import pytest
import redis
import redis.asyncio

from resilience import (
    LockLeaseLostError,
    LockNotAcquiredError,
    ResiliencePipelineBuilder,
    ValidationError,
    get_lock_token,
)
from resilience.primitives import lock, semaphore
from resilience.stores import RedisLockStore

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Iterator, Sequence

    from resilience.primitives import LockHandle
    from tests.redis_support import RedisServer

pytestmark = pytest.mark.redis


@pytest.fixture
def client(redis_server: RedisServer) -> Iterator[redis.Redis]:
    """A sync client of the session's server."""
    with redis.Redis(host=redis_server.host, port=redis_server.port) as connection:
        yield connection


@pytest.fixture
async def aclient(redis_server: RedisServer) -> AsyncIterator[redis.asyncio.Redis]:
    """An asyncio client of the session's server."""
    connection = redis.asyncio.Redis(host=redis_server.host, port=redis_server.port)
    yield connection
    await connection.aclose()


@pytest.fixture
def key() -> str:
    """A key no other test uses."""
    return f"order:{uuid.uuid4().hex}"


def _threads(count: int, target: Any) -> None:
    threads = [threading.Thread(target=target) for _ in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


class _Overlap:
    """Counts the bodies inside at once."""

    def __init__(self) -> None:
        self.inside = 0
        self.most = 0
        self.done = 0
        self._guard = threading.Lock()

    def enter(self) -> None:
        with self._guard:
            self.inside += 1
            self.most = max(self.most, self.inside)

    def leave(self) -> None:
        with self._guard:
            self.inside -= 1
            self.done += 1


class TestContention:
    def test_six_callers_fail_fast(self, client: redis.Redis, key: str) -> None:
        """Six concurrent callers, retries=0: one runs, five raise LockNotAcquiredError."""
        with lock(client, ttl=5) as locks:
            barrier = threading.Barrier(6)
            ran: list[int] = []
            rejected: list[LockNotAcquiredError] = []

            def caller() -> None:
                barrier.wait()
                try:
                    locks.run(key, lambda h: ran.append(h.token) or time.sleep(0.2))
                except LockNotAcquiredError as exc:
                    rejected.append(exc)

            _threads(6, caller)
        assert len(ran) == 1
        assert len(rejected) == 5
        assert {exc.key for exc in rejected} == {key}

    def test_six_callers_with_retries_run_one_at_a_time(self, client: redis.Redis, key: str) -> None:
        """Six callers with retries: all six run, never two at once."""
        overlap = _Overlap()

        def body(handle: LockHandle) -> None:
            overlap.enter()
            time.sleep(0.02)
            overlap.leave()

        with lock(client, ttl=5) as locks:
            _threads(6, lambda: locks.run(key, body, retries=200, retry_delay=0.05))
        assert overlap.done == 6
        assert overlap.most == 1

    async def test_six_tasks_with_retries_on_an_asyncio_client(self, aclient: redis.asyncio.Redis, key: str) -> None:
        """The same with asyncio tasks: all six run one at a time, tokens increasing."""
        overlap = _Overlap()
        tokens: list[int] = []

        async def body(handle: LockHandle) -> None:
            overlap.enter()
            tokens.append(handle.token)
            await asyncio.sleep(0.02)
            overlap.leave()

        async with lock(aclient, ttl=5) as locks:
            await asyncio.gather(*(locks.run_async(key, body, retries=200, retry_delay=0.05) for _ in range(6)))
        assert overlap.done == 6
        assert overlap.most == 1
        assert tokens == sorted(tokens)

    def test_a_semaphore_admits_limit_holders(self, client: redis.Redis, key: str) -> None:
        """semaphore(limit=3), six callers with retries: never more than three inside."""
        overlap = _Overlap()

        def body(handle: LockHandle) -> None:
            overlap.enter()
            time.sleep(0.05)
            overlap.leave()

        with semaphore(client, limit=3, ttl=5) as sems:
            _threads(6, lambda: sems.run(key, body, retries=200, retry_delay=0.05))
        assert overlap.done == 6
        assert overlap.most == 3


class TestLeasePolicy:
    def test_heartbeat_is_validated_before_the_lock_is_taken(self, client: redis.Redis, key: str) -> None:
        """True, 0 and more than ttl/2 are refused; no key is written."""
        locks = lock(client, ttl=1)
        for heartbeat in (True, 0, 0.6):
            with pytest.raises(ValidationError, match="heartbeat"):
                locks.run(key, lambda h: None, heartbeat=heartbeat)
        assert client.exists(f"lock:{key}") == 0

    def test_no_heartbeat_and_a_body_outliving_the_ttl(self, client: redis.Redis, key: str) -> None:
        """heartbeat=False: the signal aborts at the local deadline and run raises."""
        locks = lock(client, ttl=0.2)
        with pytest.raises(LockLeaseLostError) as caught:
            locks.run(key, lambda h: h.signal.wait(2), heartbeat=False)
        assert caught.value.key == key

    def test_a_deleted_key_is_a_loss_even_when_the_body_returned(self, client: redis.Redis, key: str) -> None:
        """Another client deletes the key: the next renewal says so; run raises though fn returned."""
        locks = lock(client, ttl=1)

        def body(handle: LockHandle) -> str:
            client.delete(f"lock:{key}")
            assert handle.signal.wait(2)
            return "charged"

        with pytest.raises(LockLeaseLostError):
            locks.run(key, body, heartbeat=0.05)

    def test_a_stolen_key_aborts_the_signal_and_the_reason_propagates(self, client: redis.Redis, key: str) -> None:
        """The key expires and another holder takes it: the signal's reason comes out unchanged."""
        locks = lock(client, ttl=1)
        reasons: list[BaseException | None] = []

        def body(handle: LockHandle) -> None:
            client.delete(f"lock:{key}")
            # The thief goes to the store: `lock(...).acquire` here would run under this body's
            # context and raise its reason once the 50 ms heartbeat has seen the loss (no lock
            # is taken under an aborted signal), which a loaded machine lets happen first.
            assert RedisLockStore(client).acquire(key, "thief", 5) is not None
            handle.signal.wait(30)  # returns once the renewal finds the key taken
            reasons.append(handle.signal.reason)
            handle.signal.raise_if_aborted()

        with pytest.raises(LockLeaseLostError) as caught:
            locks.run(key, body, heartbeat=0.05)
        assert caught.value is reasons[0]

    def test_on_renew_error_on_a_failing_renewal(self, client: redis.Redis, key: str) -> None:
        """A store whose renewal raises once: on_renew_error is told, the lease survives."""
        errors: list[Exception] = []

        class FlakyOnce(RedisLockStore):
            failed = False

            def renew_many(self, items: Sequence[tuple[str, str, float]]) -> list[bool | Exception]:
                if not self.failed:  # the engine renews through renew_many, as for the lock strategy
                    self.failed = True
                    msg = "blip"
                    raise ConnectionError(msg)
                return super().renew_many(items)

        store = FlakyOnce(client)
        locks = lock(store, ttl=0.6)

        def body(handle: LockHandle) -> bool:
            time.sleep(0.5)
            return handle.signal.aborted

        assert locks.run(key, body, heartbeat=0.1, on_renew_error=errors.append) is False
        deadline = time.monotonic() + 5  # told off the renewing thread, maybe a moment later
        while not errors and time.monotonic() < deadline:
            time.sleep(0.01)
        assert [str(e) for e in errors] == ["blip"]

    def test_self_release_bare_acquire_and_extend(self, client: redis.Redis, key: str) -> None:
        """A self-released handle ends quietly; a bare handle is not renewed; extend sets now + ttl."""
        locks = lock(client, ttl=0.3)
        assert locks.run(key, lambda h: h.release()) is True
        handle = locks.acquire(key)
        assert handle is not None
        assert 0 < client.pttl(f"lock:{key}") <= 300
        assert handle.extend(5) is True
        assert 4000 < client.pttl(f"lock:{key}") <= 5000
        assert handle.extend() is True
        assert client.pttl(f"lock:{key}") <= 300
        time.sleep(0.4)  # no background renewal: the lease lapses
        assert not handle.signal.aborted
        assert handle.extend() is False
        assert isinstance(handle.signal.reason, LockLeaseLostError)

    def test_ambient_token(self, client: redis.Redis, key: str) -> None:
        """run and hold set get_lock_token(); the outer token comes back after a nested lock."""
        with lock(client) as locks, locks.hold(key) as outer:
            assert get_lock_token() == outer.token
            assert locks.run(key + ":inner", lambda h: get_lock_token() == h.token)
            assert get_lock_token() == outer.token
        assert get_lock_token() is None


class TestClients:
    async def test_an_asyncio_client_enables_only_the_async_methods(
        self, aclient: redis.asyncio.Redis, key: str
    ) -> None:
        """lock(redis.asyncio.Redis): run_async works; run raises ValidationError naming the sync client."""
        locks = lock(aclient)
        with pytest.raises(ValidationError, match=r"redis\.Redis"):
            locks.run(key, lambda h: None)
        with pytest.raises(ValidationError, match=r"redis\.Redis"):
            locks.acquire(key)
        with pytest.raises(ValidationError, match=r"redis\.Redis"):
            locks.hold(key).__enter__()
        handle = await locks.acquire_async(key)
        assert handle is not None
        assert await handle.release_async() is True
        await locks.aclose()

    async def test_a_sync_client_enables_only_the_sync_methods(self, client: redis.Redis, key: str) -> None:
        """lock(redis.Redis): run works; run_async raises ValidationError naming the asyncio client."""
        locks = lock(client)

        async def body(handle: LockHandle) -> None:
            pass

        with pytest.raises(ValidationError, match=r"redis\.asyncio\.Redis"):
            await locks.run_async(key, body)
        with pytest.raises(ValidationError, match=r"redis\.asyncio\.Redis"):
            await locks.acquire_async(key)
        assert locks.run(key, lambda h: h.token) > 0
        locks.close()

    async def test_factories_and_awaitables(self, redis_server: RedisServer, key: str) -> None:
        """A sync factory enables the sync side; an async factory or an awaitable the async side."""
        made: list[Any] = []

        def sync_factory() -> redis.Redis:
            made.append(redis.Redis(host=redis_server.host, port=redis_server.port))
            return made[-1]

        async def async_factory() -> redis.asyncio.Redis:
            made.append(redis.asyncio.Redis(host=redis_server.host, port=redis_server.port))
            return made[-1]

        assert lock(sync_factory).run(key, lambda h: h.token) > 0
        async_locks = lock(async_factory)
        with pytest.raises(ValidationError):
            async_locks.acquire(key)
        handle = await async_locks.acquire_async(key)
        assert handle is not None
        assert await handle.release_async()
        awaited = lock(async_factory())
        assert await awaited.run_async(key, _token) > 0
        made[0].close()
        for connection in made[1:]:
            await connection.aclose()

    def test_the_strategy_and_the_primitive_exclude_each_other(self, client: redis.Redis) -> None:
        """add_lock("order:42", store=RedisLockStore(client, prefix="lock")) vs lock(client).run("order:42")."""
        key = f"order:{uuid.uuid4().hex[:6]}"
        pipeline = ResiliencePipelineBuilder().add_lock(key, store=RedisLockStore(client, prefix="lock")).build()
        locks = lock(client)

        def inside_pipeline() -> None:
            with pytest.raises(LockNotAcquiredError):
                locks.run(key, lambda h: None)

        pipeline.execute(inside_pipeline)

        def inside_primitive(handle: LockHandle) -> None:
            with pytest.raises(LockNotAcquiredError):
                pipeline.execute(lambda: None)

        locks.run(key, inside_primitive)
        assert locks.run(key, lambda h: True)


def test_exclusion_on_a_cluster(redis_cluster: Any) -> None:
    """On Redis Cluster too, the strategy and the primitive exclude each other on the same key."""
    import redis.cluster

    key = f"order:{uuid.uuid4().hex[:6]}"
    client = redis.cluster.RedisCluster(host="127.0.0.1", port=redis_cluster.port)
    try:
        store = RedisLockStore(client, prefix="lock")
        pipeline = ResiliencePipelineBuilder().add_lock(key, store=store).build()
        locks = lock(client)

        def inside_pipeline() -> None:
            with pytest.raises(LockNotAcquiredError):
                locks.run(key, lambda h: None)

        pipeline.execute(inside_pipeline)
        assert locks.run(key, lambda h: h.token > 0)
        store.close()
        locks.close()
    finally:
        client.close()


async def _token(handle: LockHandle) -> int:
    return handle.token
