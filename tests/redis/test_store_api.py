"""How the Redis stores take their clients, check their arguments and close what they opened."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
import time
from typing import Any

import pytest
import redis
import redis.asyncio

from resilience.exceptions import ValidationError
from resilience.stores import (
    AsyncLockStore,
    AsyncSemaphoreStore,
    AsyncSupportsLeaseInfo,
    AsyncSupportsReleaseNotification,
    LockStore,
    RedisLockStore,
    RedisSemaphoreStore,
    SemaphoreStore,
    SupportsLeaseInfo,
    SupportsReleaseNotification,
    serves,
)
from resilience.stores import _redis_notify as notify

pytestmark = pytest.mark.redis


class ScriptOnly:
    """A client with nothing but script calls (like an HTTP-based Redis client would offer)."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.calls: list[str] = []

    def eval(self, *args: Any) -> Any:
        self.calls.append("eval")
        return self._inner.eval(*args)

    def evalsha(self, *args: Any) -> Any:
        self.calls.append("evalsha")
        return self._inner.evalsha(*args)

    def script_load(self, script: str) -> Any:
        return self._inner.script_load(script)


class AsyncScriptOnly(ScriptOnly):
    """The asyncio flavour of `ScriptOnly`."""

    async def eval(self, *args: Any) -> Any:
        self.calls.append("eval")
        return await self._inner.eval(*args)

    async def evalsha(self, *args: Any) -> Any:
        self.calls.append("evalsha")
        return await self._inner.evalsha(*args)

    async def script_load(self, script: str) -> Any:
        return await self._inner.script_load(script)


def test_the_module_imports_without_redis() -> None:
    """redis-py is optional: the stores import (and construct) without it."""
    code = (
        "import sys; sys.modules['redis'] = None\n"
        "from resilience.stores import RedisLockStore\n"
        "class C:\n    def evalsha(self, *a): pass\n"
        "print(RedisLockStore(C()))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "RedisLockStore(prefix='lock', flavours=sync)" in result.stdout


@pytest.mark.parametrize("cls", [RedisLockStore, RedisSemaphoreStore])
def test_a_client_is_required(cls: type[Any]) -> None:
    """Without any client the store refuses to be built, naming both options."""
    with pytest.raises(ValidationError, match=r"client=.*async_client="):
        cls()


def test_prefix_must_be_a_non_empty_string() -> None:
    with pytest.raises(ValidationError, match="prefix"):
        RedisLockStore(lambda: None, prefix="")


def test_clients_in_the_wrong_slot_are_refused(redis_server: Any) -> None:
    """An asyncio client passed as client=, or a sync one as async_client=, says where it goes."""
    async_client = redis.asyncio.Redis(port=redis_server.port)
    sync_client = redis.Redis(port=redis_server.port)
    try:
        with pytest.raises(ValidationError, match="as async_client="):
            RedisLockStore(async_client)
        with pytest.raises(ValidationError, match="as client="):
            RedisLockStore(async_client=sync_client)
        with pytest.raises(ValidationError, match="client="):
            RedisLockStore(42)
        with pytest.raises(ValidationError, match="async_client="):
            RedisLockStore(async_client=42)
    finally:
        sync_client.close()
        asyncio.run(async_client.aclose())


async def test_only_the_flavours_with_a_client_are_offered(sync_redis: Any, async_redis: Any) -> None:
    """A flavour without a client is not offered (the store says so), so isinstance tells the truth."""
    sync_only = RedisLockStore(sync_redis)
    async_only = RedisSemaphoreStore(async_client=async_redis)
    assert sync_only.has_sync_client
    assert not sync_only.has_async_client
    assert async_only.has_async_client
    assert not async_only.has_sync_client
    assert serves(sync_only, LockStore)
    assert serves(sync_only, SupportsLeaseInfo)
    assert serves(sync_only, SupportsReleaseNotification)
    assert not serves(sync_only, AsyncLockStore)
    assert not serves(sync_only, AsyncSupportsLeaseInfo)
    assert not serves(sync_only, AsyncSupportsReleaseNotification)
    assert serves(async_only, AsyncSemaphoreStore)
    assert not serves(async_only, SemaphoreStore)
    assert type(sync_only) is RedisLockStore  # a fixed surface: the method is there, and refuses


async def test_a_missing_flavour_names_the_client_to_pass(sync_redis: Any, async_redis: Any) -> None:
    """Reached through the class, a missing flavour raises ValidationError naming the option."""
    sync_only = RedisLockStore(sync_redis)
    async_only = RedisSemaphoreStore(async_client=async_redis)
    with pytest.raises(ValidationError, match=r"acquire_async needs an asyncio client: pass async_client="):
        await RedisLockStore.acquire_async(sync_only, "k", "o", 1)
    with pytest.raises(ValidationError, match="async_client="):
        await RedisLockStore.wait_released_async(sync_only, "k", 0)
    with pytest.raises(ValidationError, match=r"acquire needs a sync client: pass client="):
        RedisSemaphoreStore.acquire(async_only, "k", "o", 1, 1)
    with pytest.raises(ValidationError, match="client="):
        RedisSemaphoreStore.release(async_only, "k", "o")


def test_a_sync_factory_is_called_once_on_first_use(redis_server: Any) -> None:
    """A zero-argument factory defers the connection until the store is first used."""
    made: list[Any] = []

    def factory() -> Any:
        made.append(redis.Redis(port=redis_server.port))
        return made[-1]

    store = RedisLockStore(factory)
    assert made == []
    try:
        assert store.acquire("factory", "o", 1) is not None
        assert store.release("factory", "o")
        assert len(made) == 1
    finally:
        for client in made:
            client.close()


def test_a_client_class_is_a_factory(redis_server: Any) -> None:
    """`redis.Redis` itself (a class) is a zero-argument factory, not a client."""

    class Local(redis.Redis):
        def __init__(self) -> None:
            super().__init__(port=redis_server.port)

    store = RedisLockStore(Local, async_client=redis.asyncio.Redis)
    assert store._sync_client is not None
    assert store._sync_client._client is None
    assert store.acquire("class-factory", "o", 1) is not None
    assert store.release("class-factory", "o")
    store._sync_client.get().close()


def test_a_sync_factory_must_return_a_sync_client() -> None:
    with pytest.raises(ValidationError, match="factory must return a sync redis client"):
        RedisLockStore(lambda: "not a client").acquire("k", "o", 1)


@pytest.mark.parametrize("form", ["awaitable", "sync factory", "async factory"])
async def test_async_client_forms(redis_server: Any, form: str) -> None:
    """async_client= takes a client, an awaitable of one, or a sync or async factory of one."""
    client = redis.asyncio.Redis(port=redis_server.port)

    async def make() -> Any:
        return client

    source: Any = make() if form == "awaitable" else (lambda: client) if form == "sync factory" else make
    store = RedisLockStore(async_client=source)
    try:
        tokens = await asyncio.gather(*(store.acquire_async(f"forms:{form}", "o", 1) for _ in range(3)))
        assert len(set(tokens)) == 1
        assert await store.release_async(f"forms:{form}", "o")
    finally:
        await store.aclose()
        await client.aclose()


async def test_an_async_factory_must_produce_a_client() -> None:
    store = RedisLockStore(async_client=lambda: "nope")
    with pytest.raises(ValidationError, match="must produce an asyncio redis client"):
        await store.acquire_async("k", "o", 1)


def test_an_unused_awaitable_is_closed_without_a_warning() -> None:
    """Closing a store whose awaitable was never awaited closes it (no 'never awaited' warning)."""

    async def never() -> Any:  # pragma: no cover - never runs
        return None

    store = RedisLockStore(async_client=never())
    store.close()
    store.close()


BAD_TTLS = [0, -1, float("nan"), float("inf"), True, "1", None]


@pytest.mark.parametrize("ttl", BAD_TTLS, ids=repr)
def test_bad_ttls_are_refused(sync_redis: Any, ttl: Any) -> None:
    with pytest.raises(ValidationError, match="ttl"):
        RedisLockStore(sync_redis).acquire("k", "o", ttl)


@pytest.mark.parametrize("limit", [0, -1, True, 1.5, "2"], ids=repr)
def test_bad_limits_are_refused(sync_redis: Any, limit: Any) -> None:
    with pytest.raises(ValidationError, match="limit"):
        RedisSemaphoreStore(sync_redis).acquire("k", "o", 1, limit)


def test_keys_and_owners_must_be_strings(sync_redis: Any) -> None:
    store = RedisLockStore(sync_redis)
    with pytest.raises(ValidationError, match="key"):
        store.acquire(b"k", "o", 1)  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match="owner"):
        store.release("k", 7)  # type: ignore[arg-type]


def test_repr_and_context_manager(sync_redis: Any) -> None:
    with RedisSemaphoreStore(sync_redis, prefix="jobs") as store:
        assert repr(store) == "RedisSemaphoreStore(prefix='jobs', flavours=sync)"
        assert store.keys("a") == ("{jobs:a}", "{jobs:a}:tokens")


async def test_async_context_manager(async_redis: Any) -> None:
    async with RedisLockStore(async_client=async_redis) as store:
        assert repr(store) == "RedisLockStore(prefix='lock', flavours=async)"


async def test_a_script_only_client_is_enough(sync_redis: Any, async_redis: Any, key: str, deployment: Any) -> None:
    """Acquire, renew, release and polling need nothing but EVALSHA/EVAL (NOSCRIPT included)."""
    client = ScriptOnly(sync_redis)
    store = RedisLockStore(client, async_client=AsyncScriptOnly(async_redis))
    deployment.script_flush()
    token = store.acquire(key, "a", 5)
    assert client.calls == ["evalsha", "eval"]
    assert store.acquire_or_ttl(key, "b", 1)[0] is None
    assert store.renew(key, "a", 5)
    assert await store.renew_async(key, "a", 5)
    assert store.release(key, "a")
    assert await store.acquire_async(key, "b", 5) > token
    # No pub/sub on this client: a held key is waited out (a plain poll interval), a free one
    # answers at once; then polling finds it free.
    started = time.perf_counter()
    assert store.wait_released(key, 0.1) is False
    assert await store.wait_released_async(key, 0.1) is False
    assert time.perf_counter() - started >= 0.2
    assert await store.release_async(key, "b")
    started = time.perf_counter()
    assert await store.wait_released_async(key, 5) is True
    assert store.wait_released(key, 5) is True
    assert time.perf_counter() - started < 2
    assert store.acquire(key, "c", 1) is not None
    assert await store.release_async(key, "c")
    await store.aclose()


async def test_a_script_only_client_renews_many_one_call_each(sync_redis: Any, async_redis: Any, key: str) -> None:
    """Without `pipeline()`, `renew_many` runs one script call per lease: each answer in its place."""
    client = ScriptOnly(sync_redis)
    store = RedisLockStore(client, async_client=AsyncScriptOnly(async_redis))
    assert store.acquire(key, "a", 5) is not None
    items = [(key, "a", 5.0), (key, "b", 5.0), (key, "a", -1.0)]
    for answers in (store.renew_many(items), await store.renew_many_async(items)):
        assert answers[:2] == [True, False]
        assert isinstance(answers[2], ValidationError)
    assert client.calls.count("evalsha") == 3  # the acquire and the two valid renewals
    assert store.release(key, "a")
    await store.aclose()


def test_older_servers_without_spublish_release_without_notifying(sync_redis: Any, key: str) -> None:
    """On a Cluster older than Redis 7 (no SPUBLISH) release still works, just without a wake-up."""

    class RedisCluster(ScriptOnly):
        def evalsha(self, *args: Any) -> Any:
            if args[-1] == "SPUBLISH":
                raise redis.exceptions.ResponseError("ERR unknown command 'SPUBLISH', with args beginning with:")
            return super().evalsha(*args)

    store = RedisLockStore(RedisCluster(sync_redis))
    store.acquire(key, "a", 1)
    assert store.release(key, "a") is True
    store.acquire(key, "a", 1)
    assert store.release(key, "a") is True


def test_script_errors_propagate_unchanged(sync_redis: Any, key: str) -> None:
    """A key of the wrong type is the caller's problem: Redis's error comes through as is."""
    sync_redis.set("lock:" + key, "a string")
    store = RedisLockStore(sync_redis)
    with pytest.raises(redis.exceptions.ResponseError, match="WRONGTYPE"):
        store.acquire(key, "a", 1)
    with pytest.raises(redis.exceptions.ResponseError, match="WRONGTYPE"):
        store.release(key, "a")
    sync_redis.delete("lock:" + key)


class _BrokenPubSub:
    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def eval(self, *args: Any) -> Any:
        return self._inner.eval(*args)

    def evalsha(self, *args: Any) -> Any:
        return self._inner.evalsha(*args)

    def pubsub(self) -> Any:
        raise redis.exceptions.ConnectionError("no pub/sub today")


def test_a_failing_subscription_degrades_to_a_poll_interval(sync_redis: Any, key: str) -> None:
    """If the subscription cannot be made, the wait just sleeps its timeout."""
    store = RedisLockStore(_BrokenPubSub(sync_redis))
    store.acquire(key, "a", 5)
    started = time.perf_counter()
    assert store.wait_released(key, 0.1) is False
    assert time.perf_counter() - started >= 0.1
    store.close()


async def test_a_failing_async_subscription_degrades_to_a_poll_interval(async_redis: Any, key: str) -> None:
    class Broken(AsyncScriptOnly):
        def pubsub(self) -> Any:
            raise redis.exceptions.ConnectionError("no pub/sub today")

    store = RedisLockStore(async_client=Broken(async_redis))
    await store.acquire_async(key, "a", 5)
    started = time.perf_counter()
    assert await store.wait_released_async(key, 0.1) is False
    assert time.perf_counter() - started >= 0.1
    await store.aclose()


def test_the_listener_stops_when_nothing_is_subscribed(
    sync_redis: Any, key: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An idle channel is unsubscribed after the linger; then the thread ends and its connection closes."""
    monkeypatch.setattr(notify, "_LINGER", 0.05)
    store = RedisLockStore(sync_redis)
    assert store.wait_released(key, 5) is True  # a free key answers at once, once subscribed
    listener = store._listener
    assert listener is not None
    thread = listener._thread
    assert thread is not None
    thread.join(2)
    assert not thread.is_alive()
    assert listener._pubsub is None
    # It starts again on demand.
    store.acquire(key, "a", 5)
    assert store.wait_released(key, 0.01) is False
    store.close()
    assert store._listener is None


async def test_the_async_listener_stops_when_nothing_is_subscribed(
    async_redis: Any, key: str, monkeypatch: pytest.MonkeyPatch, deployment: Any
) -> None:
    monkeypatch.setattr(notify, "_LINGER", 0.05)
    store = RedisLockStore(async_client=async_redis)
    assert await store.wait_released_async(key, 5) is True
    listener = store._async_listeners[asyncio.get_running_loop()]
    task = listener._task
    assert task is not None
    await asyncio.wait_for(task, 2)
    assert listener._pubsub is None
    await store.acquire_async(key, "a", 5)
    assert await store.wait_released_async(key, 0.01) is False
    await store.aclose()


def test_close_wakes_the_waiters(sync_redis: Any, key: str) -> None:
    """Closing the store ends pending waits at once."""
    store = RedisLockStore(sync_redis)
    store.acquire(key, "a", 10)
    results: list[bool] = []
    waiter = threading.Thread(target=lambda: results.append(store.wait_released(key, 5)))
    started = time.perf_counter()
    waiter.start()
    time.sleep(0.1)
    store.close()
    waiter.join(2)
    assert results
    assert time.perf_counter() - started < 2


async def test_aclose_wakes_the_async_waiters(async_redis: Any, key: str) -> None:
    store = RedisLockStore(async_client=async_redis)
    await store.acquire_async(key, "a", 10)
    waiter = asyncio.ensure_future(store.wait_released_async(key, 5))
    await asyncio.sleep(0.1)
    started = time.perf_counter()
    await store.aclose()
    await asyncio.wait_for(waiter, 2)
    assert time.perf_counter() - started < 2


async def test_older_servers_without_spublish_release_async(async_redis: Any, key: str) -> None:
    class RedisCluster(AsyncScriptOnly):
        async def evalsha(self, *args: Any) -> Any:
            if args[-1] == "SPUBLISH":
                raise redis.exceptions.ResponseError("ERR unknown command 'SPUBLISH'")
            return await super().evalsha(*args)

    store = RedisSemaphoreStore(async_client=RedisCluster(async_redis))
    assert await store.acquire_async(key, "a", 1, 1) is not None
    assert await store.release_async(key, "a") is True
    assert await store.acquire_async(key, "a", 1, 1) is not None
    assert await store.release_async(key, "a") is True


async def test_async_script_errors_propagate_unchanged(async_redis: Any, key: str) -> None:
    await async_redis.set("lock:" + key, "a string")
    store = RedisLockStore(async_client=async_redis)
    with pytest.raises(redis.exceptions.ResponseError, match="WRONGTYPE"):
        await store.acquire_async(key, "a", 1)
    with pytest.raises(redis.exceptions.ResponseError, match="WRONGTYPE"):
        await store.release_async(key, "a")
    await async_redis.delete("lock:" + key)


def test_a_failing_check_means_wait(sync_redis: Any, key: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """If asking whether the key is free fails, the waiter just waits (a hint never raises)."""
    store = RedisLockStore(sync_redis)
    store.acquire(key, "a", 5)
    assert store.wait_released(key, 0.01) is False  # subscribed

    def broken(*args: Any) -> Any:
        raise redis.exceptions.ConnectionError("down")

    monkeypatch.setattr(store._sync_client, "run", broken)
    assert store.wait_released(key, 0.05) is False
    store.close()


async def test_a_failing_async_check_means_wait(async_redis: Any, key: str, monkeypatch: pytest.MonkeyPatch) -> None:
    store = RedisLockStore(async_client=async_redis)
    await store.acquire_async(key, "a", 5)

    async def broken(*args: Any) -> Any:
        raise redis.exceptions.ConnectionError("down")

    monkeypatch.setattr(store._async_client, "run", broken)
    assert await store.wait_released_async(key, 0.05) is False
    await store.aclose()


@pytest.mark.parametrize("cls", [RedisLockStore, RedisSemaphoreStore])
async def test_a_free_key_answers_at_once(cls: type[Any], sync_redis: Any, async_redis: Any, key: str) -> None:
    """Waiting on a key nobody holds returns True without waiting (both stores, both flavours)."""
    store = cls(sync_redis, async_client=async_redis)
    # The first wait of each flavour also opens its pub/sub connection (and, on a Cluster,
    # learns the slots): seconds on a loaded machine. A wait that sat out its timeout before
    # its check (a lost subscription confirmation) takes the whole 30 s: 3 x the bound.
    started = time.perf_counter()
    assert store.wait_released(key, 30) is True
    assert time.perf_counter() - started < 10
    started = time.perf_counter()
    assert await store.wait_released_async(key, 30) is True
    assert time.perf_counter() - started < 10
    await store.aclose()
