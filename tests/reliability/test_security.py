"""Security: only the owner renews or releases; keys are data; least-privilege ACL; TLS."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import subprocess
import tempfile
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import redis
import redis.asyncio

from resilience import ResiliencePipelineBuilder, get_lock_token
from resilience.stores import RedisLockStore, RedisSemaphoreStore
from resilience.stores import _redis_scripts as scripts
from tests.redis_support import free_port
from tests.reliability.gated import GatedStore

if TYPE_CHECKING:
    from collections.abc import Iterator

    from tests.redis_support import RedisServer

pytestmark = pytest.mark.redis

KNOWN_SCRIPTS = {value.sha: value.source for value in vars(scripts).values() if isinstance(value, scripts.LuaScript)}

# The exact line documented in docs/redis.md ("Least privilege"); `{user}` and `{password}` filled in.
ACL_LINE = (
    "ACL SETUSER {user} reset on >{password} ~lock:* ~{{lock:* ~{{semaphore:* &lock:* &{{semaphore:* "
    "-@all +evalsha +eval +time +exists +set +hget +hmget +hset +hdel +hexists +hincrby +pexpire +pttl "
    "+zadd +zcard +zcount +zrange +zrangebyscore +zrem +zremrangebyscore +zscore "
    "+publish +spublish +subscribe +ssubscribe +unsubscribe +sunsubscribe +ping"
)


async def test_only_the_owner_can_renew_or_release(redis_server: RedisServer, uid: str) -> None:
    """Owner ids are >= 128 random bits, unique per execution; a guessed id renews and releases nothing."""
    async_client = redis.asyncio.Redis(port=redis_server.port)
    other_client = redis.Redis(port=redis_server.port)  # another client, another process's view
    inner = RedisLockStore(async_client=async_client)
    intruder = RedisLockStore(other_client)
    gated = GatedStore(inner)
    pipeline = ResiliencePipelineBuilder().add_lock(uid, ttl=5, store=gated).build()
    try:

        async def body() -> None:
            owner = gated.calls[-1][2]
            token = get_lock_token()
            guesses = [
                "",
                "owner",
                uid,
                str(token),
                owner[:-1],
                owner[:-1] + ("0" if owner[-1] != "0" else "1"),
                owner.upper(),
                owner + " ",
            ]
            for guess in guesses:
                assert not await asyncio.to_thread(intruder.renew, uid, guess, 60)
                assert not await asyncio.to_thread(intruder.release, uid, guess)
            assert await asyncio.to_thread(intruder.acquire, uid, "intruder", 60) is None
            assert other_client.hget(f"lock:{uid}", "owner") == owner.encode()  # still ours

        await pipeline.execute_async(body)
        await pipeline.execute_async(body)
        owners = [owner for method, _, owner in gated.calls if method == "acquire"]
        assert len(set(owners)) == 2
        for owner in owners:
            assert len(owner) >= 32
            assert int(owner[-32:], 16) >= 0  # 128 bits of hex at least
    finally:
        await inner.aclose()
        intruder.close()
        await async_client.aclose()
        other_client.close()


class RecordingClient:
    """A script-only client that records what it sends (the store needs only evalsha/eval)."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self.sent: list[tuple[str, str, tuple[Any, ...]]] = []

    def evalsha(self, sha: str, numkeys: int, *args: Any) -> Any:
        self.sent.append(("evalsha", sha, args))
        return self.client.evalsha(sha, numkeys, *args)

    def eval(self, source: str, numkeys: int, *args: Any) -> Any:
        self.sent.append(("eval", source, args))
        return self.client.eval(source, numkeys, *args)


HOSTILE = [
    "'); redis.call('FLUSHALL') --",
    "]] redis.call('SET', 'pwned', 1) --[[",
    "\" .. redis.call('FLUSHALL') .. \"",
    "KEYS[1]",
    "ARGV[1]",
    "\x00\r\n*1\r\n$8\r\nFLUSHALL\r\n",
    "{lock:x}",
    "lock:*",
    "k" * 20_000,
]


@pytest.mark.parametrize("hostile", HOSTILE)
def test_hostile_keys_and_owners_are_only_ever_script_arguments(redis_server: RedisServer, hostile: str) -> None:
    client = redis.Redis(port=redis_server.port)
    canary = f"canary-{uuid.uuid4().hex}"
    client.set(canary, "alive")
    recording = RecordingClient(client)
    locks, semaphores = RedisLockStore(recording), RedisSemaphoreStore(recording)
    try:
        token = locks.acquire(hostile, hostile, 5)
        assert token is not None
        assert locks.renew(hostile, hostile, 5)
        assert locks.acquire(hostile, "other", 5) is None
        assert locks.release(hostile, hostile)
        assert semaphores.acquire(hostile, hostile, 5, 2) is not None
        assert semaphores.release(hostile, hostile)
        for kind, script, args in recording.sent:
            # Exactly a known script (by sha, or its whole source after a NOSCRIPT): nothing of
            # the caller's was spliced into it. (The source itself may contain "KEYS[1]".)
            assert script in KNOWN_SCRIPTS if kind == "evalsha" else script in KNOWN_SCRIPTS.values()
            assert any(hostile in str(arg) for arg in args)
        assert client.get(canary) == b"alive"
        assert client.exists(f"lock:{hostile}")  # the tombstone, under exactly that name
        assert not client.exists("pwned")
    finally:
        client.delete(canary)
        locks.close()
        semaphores.close()
        client.close()


@pytest.fixture
def acl_users(redis_server: RedisServer) -> Iterator[tuple[str, str, str]]:
    admin = redis.Redis(port=redis_server.port)
    suffix = uuid.uuid4().hex[:8]
    allowed, denied, password = f"locks-{suffix}", f"nolocks-{suffix}", uuid.uuid4().hex
    admin.execute_command(*ACL_LINE.format(user=allowed, password=password).split())
    admin.execute_command("ACL", "SETUSER", denied, "reset", "on", f">{password}", "~*", "&*", "-@all", "+ping", "+get")
    try:
        yield allowed, denied, password
    finally:
        admin.execute_command("ACL", "DELUSER", allowed, denied)
        admin.close()


async def test_the_stores_work_under_the_documented_acl_user(
    redis_server: RedisServer, acl_users: tuple[str, str, str], uid: str
) -> None:
    """The minimal ACL of docs/redis.md: locks, semaphores, release notifications, sync and async."""
    user, _, password = acl_users
    client = redis.Redis(port=redis_server.port, username=user, password=password)
    async_client = redis.asyncio.Redis(port=redis_server.port, username=user, password=password)
    locks = RedisLockStore(client, async_client=async_client)
    semaphores = RedisSemaphoreStore(client, async_client=async_client)
    try:
        pipeline = ResiliencePipelineBuilder().add_lock(uid, ttl=0.6, store=locks).build()

        def slow() -> int | None:
            time.sleep(0.5)  # long enough for a renewal (ttl/3)
            return get_lock_token()

        assert pipeline.execute(slow) is not None

        async def fast() -> int | None:
            return get_lock_token()

        assert await pipeline.execute_async(fast) is not None
        # Waiting with notifications (subscribe, publish on release) works too.
        assert locks.acquire(uid, "a", 5) is not None
        waiter = asyncio.create_task(asyncio.to_thread(locks.wait_released, uid, 5))
        await asyncio.sleep(0.3)
        assert locks.release(uid, "a")
        assert await asyncio.wait_for(waiter, 10) is True
        assert await locks.acquire_async(uid, "b", 5) is not None
        assert await locks.wait_released_async(uid, 0.2) is False
        assert await locks.release_async(uid, "b")
        assert semaphores.acquire(uid, "a", 5, 1) is not None
        assert semaphores.renew(uid, "a", 5)
        assert await semaphores.acquire_async(uid, "b", 5, 1) is None
        assert semaphores.release(uid, "a")
        assert await semaphores.wait_released_async(uid, 0.2) is True
        # Permits: several slots per holder, a queued request for several, its release.
        assert semaphores.acquire(uid, "c", 5, 3, 2) is not None
        assert semaphores.acquire_or_queue(uid, "d", 5, 3, 2)[0] is None
        assert semaphores.holders(uid)[0][3] == 2
        assert semaphores.release(uid, "c")
        assert (await semaphores.acquire_or_queue_async(uid, "d", 5, 3, 2))[0] is not None
        assert await semaphores.release_async(uid, "d")
    finally:
        await locks.aclose()
        await semaphores.aclose()
        await async_client.aclose()
        client.close()


def test_the_documented_acl_line_is_the_tested_one() -> None:
    text = (Path(__file__).resolve().parents[2] / "docs" / "redis.md").read_text()
    assert ACL_LINE.format(user="locks", password="PASSWORD") in text  # noqa: S106 -- the placeholder the docs show


def test_a_user_without_those_rights_gets_the_servers_noperm_error_unchanged(
    redis_server: RedisServer, acl_users: tuple[str, str, str], uid: str
) -> None:
    _, user, password = acl_users
    client = redis.Redis(port=redis_server.port, username=user, password=password)
    store = RedisLockStore(client)
    try:
        pipeline = ResiliencePipelineBuilder().add_lock(uid, ttl=5, store=store).build()
        with pytest.raises(redis.exceptions.NoPermissionError) as raised:
            pipeline.execute(lambda: None)
        assert type(raised.value) is redis.exceptions.NoPermissionError
        assert "evalsha" in str(raised.value).lower()
        with pytest.raises(redis.exceptions.NoPermissionError):
            store.acquire(uid, "x", 5)
    finally:
        store.close()
        client.close()


@pytest.fixture(scope="module")
def tls_server() -> Iterator[tuple[int, Path]]:
    """A redis-server with TLS only, on a throwaway self-signed certificate; skips without TLS support."""
    openssl, binary = shutil.which("openssl"), shutil.which("redis-server")
    if openssl is None or binary is None:
        pytest.skip("TLS test needs openssl and redis-server")
    workdir = Path(tempfile.mkdtemp(prefix="resilience-tls-"))
    cert, key = workdir / "cert.pem", workdir / "key.pem"
    subprocess.run(
        [openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(cert), "-days", "1",
         "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    port = free_port()
    args = [binary, "--port", "0", "--tls-port", str(port), "--bind", "127.0.0.1", "--tls-cert-file", str(cert),
            "--tls-key-file", str(key), "--tls-ca-cert-file", str(cert), "--tls-auth-clients", "no",
            "--save", "", "--appendonly", "no", "--dir", str(workdir)]  # fmt: skip
    process = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if process.poll() is not None:
                output = process.stdout.read().decode(errors="replace") if process.stdout else ""
                pytest.skip(f"this redis-server has no TLS support (built without BUILD_TLS): {output[-300:]}")
            with contextlib.suppress(Exception):
                probe = redis.Redis(host="127.0.0.1", port=port, ssl=True, ssl_ca_certs=str(cert), socket_timeout=1)
                try:
                    if probe.ping():
                        break
                finally:
                    probe.close()
            time.sleep(0.1)
        else:
            pytest.fail("the TLS redis-server did not answer")
        yield port, cert
    finally:
        process.terminate()
        process.wait(timeout=10)
        if process.stdout is not None:
            process.stdout.close()
        shutil.rmtree(workdir, ignore_errors=True)


async def test_rediss_urls_work(tls_server: tuple[int, Path], uid: str) -> None:
    port, cert = tls_server
    url = f"rediss://127.0.0.1:{port}/0"
    client = redis.Redis.from_url(url, ssl_ca_certs=str(cert))
    async_client = redis.asyncio.Redis.from_url(url, ssl_ca_certs=str(cert))
    store = RedisLockStore(client, async_client=async_client)
    try:
        pipeline = ResiliencePipelineBuilder().add_lock(uid, ttl=5, store=store).build()
        first = pipeline.execute(get_lock_token)

        async def token() -> int | None:
            return get_lock_token()

        second = await pipeline.execute_async(token)
        assert first is not None
        assert second is not None
        assert second > first
    finally:
        await store.aclose()
        await async_client.aclose()
        client.close()
