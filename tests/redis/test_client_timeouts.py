"""Redis clients for stores come with short timeouts: the helper, the snippets, the warning.

redis-py's defaults let one call to a frozen server block its caller for about a minute (a 5 s
socket timeout, repeated ten times by redis-py 8's default retry); docs/ttl-and-timeouts.md.
"""

from __future__ import annotations

import ast
import logging
import re
import signal
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import redis
import redis.asyncio

from resilience import ResiliencePipelineBuilder, ValidationError
from resilience.limiters import RedisRateLimitStore
from resilience.stores import (
    RedisCircuitStateStore,
    RedisLockStore,
    RedisSemaphoreStore,
    _redis_client,  # the once-only memory, reset per test
    async_redis_client,
    redis_client,
)

if TYPE_CHECKING:
    from collections.abc import Iterator

    from tests.redis_support import RedisServer

ROOT = Path(__file__).parent.parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
EXAMPLES = sorted((ROOT / "examples").glob("*.py"))
BLOCK = re.compile(r"^```(?:python|py)[^\n]*\n(.*?)^```", re.MULTILINE | re.DOTALL)
BUILDERS = {"Redis", "RedisCluster", "from_url", "StrictRedis"}
"""Calls that build a redis-py client (`redis.Redis(...)`, `redis.Redis.from_url(...)`, ...)."""


def _snippets() -> list[tuple[str, str]]:
    found = [(str(path.relative_to(ROOT)), path.read_text(encoding="utf-8")) for path in EXAMPLES]
    for path in PAGES:
        for index, match in enumerate(BLOCK.finditer(path.read_text(encoding="utf-8"))):
            found.append((f"{path.relative_to(ROOT)}#{index}", match.group(1)))
    return found


def _untimed_clients(code: str) -> list[str]:
    """The client constructions in `code` that set no socket timeout."""
    try:
        tree = ast.parse(code)
    except SyntaxError:  # an illustration with signatures or ellipses: read the calls as text
        return [call for call in _calls_in_text(code) if "socket_timeout=" not in call]
    untimed = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
        if name in BUILDERS and not any(keyword.arg == "socket_timeout" for keyword in node.keywords):
            untimed.append(ast.unparse(node))
    return untimed


def _calls_in_text(code: str) -> list[str]:
    calls = []
    for match in re.finditer(r"\b(?:" + "|".join(BUILDERS) + r")\(", code):
        depth, end = 0, match.end() - 1
        for end in range(match.end() - 1, len(code)):
            depth += {"(": 1, ")": -1}.get(code[end], 0)
            if depth == 0:
                break
        calls.append(code[match.start() : end + 1])
    return calls


def test_every_snippet_that_builds_a_redis_client_sets_a_socket_timeout() -> None:
    """README, tutorial, docs and examples: `redis_client(url)` or a client with `socket_timeout=`."""
    snippets = _snippets()
    assert any("redis_client(" in code for where, code in snippets if where.startswith("README.md"))
    assert any("redis_client(" in code for where, code in snippets if where.startswith("docs/tutorial.md"))
    problems = {where: calls for where, code in snippets if (calls := _untimed_clients(code))}
    assert problems == {}


def test_the_snippet_check_finds_a_client_with_default_timeouts() -> None:
    """The check above is not blind: the clients the README built before are found."""
    assert _untimed_clients('client = redis.Redis.from_url(os.environ.get("REDIS_URL", "x"))') != []
    assert _untimed_clients("store = RedisLockStore(redis.Redis())") != []
    assert _untimed_clients("c = redis.asyncio.Redis(socket_timeout=3)") == []
    assert _untimed_clients("f(x, /, ...)\nlock(redis.Redis(port=1), ttl=10)") == ["Redis(port=1)"]


def test_the_helpers_build_clients_with_short_timeouts_and_one_retry() -> None:
    client = redis_client("redis://localhost:6379/0")
    settings = client.get_connection_kwargs()
    assert (settings["socket_timeout"], settings["socket_connect_timeout"]) == (3.0, 3.0)
    assert settings["retry"].get_retries() == 1
    aclient = async_redis_client("redis://localhost:6379/0", timeout=0.5, retries=0, health_check_interval=7)
    assert isinstance(aclient, redis.asyncio.Redis)
    asettings = aclient.get_connection_kwargs()
    assert (asettings["socket_timeout"], asettings["retry"].get_retries()) == (0.5, 0)
    assert asettings["health_check_interval"] == 7
    overridden = redis_client("redis://localhost:6379/0", socket_timeout=1.5)
    assert overridden.get_connection_kwargs()["socket_timeout"] == 1.5
    client.close()
    overridden.close()


@pytest.mark.parametrize(("options", "name"), [({"timeout": 0}, "timeout"), ({"retries": -1}, "retries")])
def test_the_helpers_refuse_bad_options(options: dict[str, Any], name: str) -> None:
    with pytest.raises(ValidationError, match=f"^{name}: "):
        redis_client("redis://localhost:6379/0", **options)
    with pytest.raises(ValidationError, match=f"^{name}: "):
        async_redis_client("redis://localhost:6379/0", **options)


@pytest.fixture
def fresh_warnings() -> Iterator[None]:
    saved = set(_redis_client._warned)
    _redis_client._warned.clear()
    yield
    _redis_client._warned.clear()
    _redis_client._warned.update(saved)


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and "Redis client" in r.getMessage()]


@pytest.mark.usefixtures("fresh_warnings")
def test_a_store_warns_once_about_a_client_without_timeouts(caplog: pytest.LogCaptureFixture) -> None:
    """A log line, not an exception; once however many stores get such a client."""
    with caplog.at_level(logging.WARNING, logger="resilience"):
        RedisLockStore(redis_client("redis://localhost:6379/0"))
        RedisLockStore(async_client=async_redis_client("redis://localhost:6379/0"))
        assert _warnings(caplog) == []
        RedisLockStore(redis.Redis(socket_timeout=None, retry=None))
        RedisLockStore(redis.Redis(socket_timeout=None, retry=None))
        RedisLockStore(async_client=redis.asyncio.Redis())
        RedisLockStore(redis.Redis)  # a factory: not called yet
    (line,) = _warnings(caplog)
    assert line.startswith("RedisLockStore: the Redis client has no socket_timeout")
    assert "resilience.stores.redis_client(url)" in line


@pytest.mark.usefixtures("fresh_warnings")
def test_redis_py_defaults_are_warned_about_by_every_redis_store(caplog: pytest.LogCaptureFixture) -> None:
    """redis-py 8's default client (5 s, ten retries), given to each store kind: one line per kind."""
    with caplog.at_level(logging.WARNING, logger="resilience"):
        for kind in (RedisLockStore, RedisSemaphoreStore, RedisCircuitStateStore, RedisRateLimitStore):
            kind(redis.Redis())
            kind(redis.Redis())
    lines = _warnings(caplog)
    assert [line.split(":")[0] for line in lines] == [
        "RedisLockStore",
        "RedisSemaphoreStore",
        "RedisCircuitStateStore",
        "RedisRateLimitStore",
    ]
    assert all("repeats a failed call 10 times" in line for line in lines)


@pytest.mark.redis
@pytest.mark.timeout(60)
def test_the_helpers_client_gives_up_on_a_frozen_server_within_its_timeout(fresh_redis_server: RedisServer) -> None:
    """A lock acquire against a frozen Redis (SIGSTOP) fails after about 2 x 0.5 s, not a minute."""
    process = fresh_redis_server._process
    assert process is not None
    client = redis_client(fresh_redis_server.url, timeout=0.5)
    store = RedisLockStore(client)
    pipeline = ResiliencePipelineBuilder().add_lock("frozen", ttl=5, store=store).build()
    assert pipeline.execute(lambda: "held") == "held"  # connected
    process.send_signal(signal.SIGSTOP)
    try:
        started = time.monotonic()
        with pytest.raises(redis.exceptions.TimeoutError):
            pipeline.execute(lambda: "never")
        elapsed = time.monotonic() - started
    finally:
        process.send_signal(signal.SIGCONT)
    assert elapsed < 10, f"the acquire gave up after {elapsed:.1f}s"  # redis-py's defaults: about 60 s
    client.close()
