"""The rate limiter's Redis scripts over every argument the limiter accepts (Hypothesis, real Redis).

For each algorithm and any `limit`/`per`/`burst`/`permits`: arguments the store refuses raise
`ValidationError` before anything is sent; the ones it accepts never get a raw `ResponseError`,
never leave a key without an expiry, and no script call takes 10 ms of the server's time
(`SLOWLOG`, on a server of this module's own). The strategy's validation (`add_rate_limiter`)
accepts exactly what the store accepts.
"""

from __future__ import annotations

import itertools
import math
import time
from typing import TYPE_CHECKING, Any

import pytest
import redis
import redis.asyncio
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st

from resilience import ResiliencePipelineBuilder, ValidationError
from resilience.limiters import RedisRateLimitStore
from resilience.limiters._algorithms import capacity, check_take
from resilience.limiters._redis_scripts import SCRIPTS
from tests.redis_support import RedisServer

if TYPE_CHECKING:
    from collections.abc import Iterator

pytestmark = pytest.mark.redis

SLOW_US = 10_000
_keys = itertools.count()

counts = st.one_of(
    st.integers(1, 20),
    st.integers(1, 200_000),
    st.integers(1, 2**60),
    st.sampled_from([1_000, 1_001, 100_000, 100_001, 1_000_000, 1_000_001, 4_000_000, 2**53 - 1, 2**53, 2**80]),
)
pers = st.one_of(
    st.floats(1e-9, 1e10, allow_nan=False, allow_infinity=False),
    st.sampled_from([1e-300, 1e-7, 1e-6, 0.001, 1.0, 1e9, 1e9 + 1, 1e14, 1e17]),
    st.integers(1, 10**10),
)


@pytest.fixture(scope="module")
def server() -> Iterator[RedisServer]:
    own = RedisServer()
    try:
        own.start()
        assert own.command("CONFIG", "SET", "slowlog-log-slower-than", str(SLOW_US)).startswith("+OK")
        yield own
    finally:
        own.close()


@pytest.fixture(scope="module")
def client(server: RedisServer) -> Iterator[Any]:
    sync = redis.Redis(host=server.host, port=server.port)
    yield sync
    sync.close()


def _slow_calls(client: Any) -> list[Any]:
    return [entry for entry in client.slowlog_get(128) if entry["duration"] >= SLOW_US]


@settings(max_examples=300, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    algorithm=st.sampled_from(["token_bucket", "sliding_window", "fixed_window"]),
    limit=counts,
    per=pers,
    burst=st.one_of(st.none(), counts),
    permits=st.one_of(st.just(1), st.integers(1, 1_001), counts, st.floats(0, 1)),
    twice=st.booleans(),
)
@example(algorithm="sliding_window", limit=100_000, per=1e-6, burst=None, permits=1_000, twice=True)
@example(algorithm="sliding_window", limit=100_000, per=1e9, burst=None, permits=1_000, twice=True)
@example(algorithm="sliding_window", limit=3_000_000, per=1.0, burst=None, permits=3_000_000, twice=False)
@example(algorithm="token_bucket", limit=2**80, per=1e-300, burst=None, permits=1, twice=True)
@example(algorithm="token_bucket", limit=4_000_000, per=1.0, burst=None, permits=1, twice=True)
@example(algorithm="token_bucket", limit=1_000_000, per=1.0, burst=None, permits=1, twice=True)
@example(algorithm="token_bucket", limit=1, per=1e9, burst=1, permits=1, twice=True)
@example(algorithm="token_bucket", limit=1, per=1e14, burst=None, permits=1, twice=False)
# A full bucket of 1e15 us whose interval, rounded, makes interval * burst exceed 1e15 by a bit.
@example(algorithm="token_bucket", limit=5345, per=1e9, burst=None, permits=1, twice=False)
@example(algorithm="fixed_window", limit=1, per=1e17, burst=None, permits=1, twice=False)
@example(algorithm="fixed_window", limit=2**53 - 1, per=1e9, burst=None, permits=2**53 - 1, twice=True)
@example(algorithm="sliding_window", limit=1, per=1e14, burst=None, permits=1, twice=False)
def test_every_accepted_limit_runs_its_script_cleanly(
    client: Any, *, algorithm: str, limit: int, per: float, burst: int | None, permits: float, twice: bool
) -> None:
    """`permits` as a float in [0, 1]: that share of the most one request can take (at least 1)."""
    if algorithm != "token_bucket":
        burst = None
    if isinstance(permits, float):
        permits = max(1, int(permits * capacity(limit, burst, algorithm)))
    assert isinstance(permits, int)
    store = RedisRateLimitStore(client)
    key = f"p{next(_keys)}"
    redis_key = store.key(key, algorithm)
    problem = check_take(key, limit, per, burst, algorithm, permits)
    client.slowlog_reset()
    event(f"{algorithm}: {'refused' if problem else 'accepted'}")
    if permits == 1:  # the strategy (permits are always 1 there) takes exactly what the store takes
        options: dict[str, Any] = {"per": per, "algorithm": algorithm, "store": store}
        if burst is not None:
            options["burst"] = burst
        if problem is None:
            ResiliencePipelineBuilder().add_rate_limiter(limit, **options).build()
        else:
            with pytest.raises(ValidationError, match=problem.split(":")[0]):
                ResiliencePipelineBuilder().add_rate_limiter(limit, **options).build()
    if problem is not None:
        with pytest.raises(ValidationError):
            store.take(key, limit, per, burst, algorithm, permits)  # type: ignore[arg-type]
        assert client.exists(redis_key) == 0
        return

    def takes(key: str) -> None:
        for _ in range(2 if twice else 1):
            wait = store.take(key, limit, per, burst, algorithm, permits)  # type: ignore[arg-type]
            assert wait >= 0
            assert math.isfinite(wait)
        assert client.pttl(store.key(key, algorithm)) != -1, "a key without expiry"

    takes(key)
    if _slow_calls(client):
        # SLOWLOG measures wall time: a server descheduled on a loaded machine logs a fast
        # script as slow. A script slow by its work is slow again on a fresh key.
        client.slowlog_reset()
        takes(f"p{next(_keys)}")
    assert _slow_calls(client) == [], (algorithm, limit, per, burst, permits)


def test_a_full_sliding_window_trims_and_fills_within_10_ms(client: Any) -> None:
    """The worst case of the log: 100,000 grants expire at once and 1,000 new ones are written.

    Measured up to five times, on fresh keys: SLOWLOG counts wall time, so a server
    descheduled on a loaded machine (two test suites beside this one on two cores) logs what
    its work never costs; work that is slow is slow every time. The window is a second, so
    that the hundred calls that fill it fit in it on such a machine too.
    """
    store = RedisRateLimitStore(client)

    def trim_and_fill(key: str) -> list[Any]:
        for _ in range(100):
            assert store.take(key, 100_000, 1.0, None, "sliding_window", 1_000) == 0.0
        assert client.llen(store.key(key, "sliding_window")) == 100_000
        time.sleep(1.05)  # every grant has left the window: the next call trims all of them
        client.slowlog_reset()
        assert store.take(key, 100_000, 1.0, None, "sliding_window", 1_000) == 0.0
        assert client.llen(store.key(key, "sliding_window")) == 1_000
        return _slow_calls(client)

    assert any(trim_and_fill(f"log-{attempt}") == [] for attempt in range(5))


@pytest.mark.parametrize("flavour", ["sync", "async"])
async def test_a_bool_limit_is_refused_even_after_the_same_int_limit(server: RedisServer, flavour: str) -> None:
    """`True == 1` and hashes alike: the checked-arguments cache must not let it through."""
    if flavour == "sync":
        sync = redis.Redis(host=server.host, port=server.port)
        store = RedisRateLimitStore(sync)
        assert store.take("b", 1, 1.0) == 0.0
        with pytest.raises(ValidationError, match="limit"):
            store.take("b", True, 1.0)
        sync.close()
        return
    client = redis.asyncio.Redis(host=server.host, port=server.port)
    store = RedisRateLimitStore(async_client=client)
    assert await store.take_async("b-async", 1, 1.0) == 0.0
    with pytest.raises(ValidationError, match="limit"):
        await store.take_async("b-async", True, 1.0)
    await client.aclose()


@pytest.mark.parametrize("flavour", ["sync", "async"])
async def test_a_period_beyond_what_pexpire_takes_is_a_validation_error(server: RedisServer, flavour: str) -> None:
    """`per=1e14`: refused before anything is written (it used to leave the log without expiry)."""
    for algorithm in ("token_bucket", "sliding_window", "fixed_window"):
        key = f"huge-{flavour}-{algorithm}"
        if flavour == "sync":
            sync = redis.Redis(host=server.host, port=server.port)
            with pytest.raises(ValidationError, match="per"):
                RedisRateLimitStore(sync).take(key, 1, 1e14, None, algorithm)  # type: ignore[arg-type]
            assert sync.exists(f"ratelimit:{algorithm}:{key}") == 0
            sync.close()
        else:
            client = redis.asyncio.Redis(host=server.host, port=server.port)
            with pytest.raises(ValidationError, match="per"):
                await RedisRateLimitStore(async_client=client).take_async(key, 1, 1e14, None, algorithm)  # type: ignore[arg-type]
            assert await client.exists(f"ratelimit:{algorithm}:{key}") == 0
            await client.aclose()


@pytest.mark.parametrize(
    ("algorithm", "argv"),
    [
        ("token_bucket", [1e-3, 1, 1]),  # an interval below a microsecond
        ("token_bucket", [1e9, 1e7, 1]),  # a bucket that refills in 1e16 us
        ("sliding_window", [1e17, 1, 1]),
        ("sliding_window", [1e6, 5000, 1001]),
        ("fixed_window", [1e17, 1, 1]),
    ],
)
def test_each_script_refuses_what_it_cannot_expire_before_writing(
    client: Any, algorithm: str, argv: list[float]
) -> None:
    """Called around the store's validation, a script still writes nothing it could not expire."""
    script = SCRIPTS[algorithm]
    key = f"raw:{algorithm}:{next(_keys)}"
    with pytest.raises(redis.ResponseError, match="invalid rate limit arguments"):
        client.eval(script.source, 1, key, *argv)
    assert client.exists(key) == 0
