"""Bad builder options for every strategy: `ValidationError` naming each bad option, at `build()`.

Each option has values that are certainly valid, certainly invalid (wrong types, bools,
negatives, zero where it must be positive, NaN) and *edge* values whose acceptance is the
library's choice (infinity, huge numbers): an edge value may build or be rejected, but only
ever with a `ValidationError` that names it. Nothing else is ever raised, and no lock is left
in the store.
"""

from __future__ import annotations

import datetime as dt
import math
import uuid
from typing import Any

import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from resilience import ResiliencePipelineBuilder, ValidationError
from resilience.stores import MemoryLockStore, RedisLockStore, RedisSemaphoreStore

NAN, INF = math.nan, math.inf
HUGE = [10**30, 1e308]
NOT_A_NUMBER = ["1", None, b"1", [1], object()]


def _opts(good: list[Any], bad: list[Any], edge: list[Any] | None = None) -> tuple[list[Any], list[Any], list[Any]]:
    return good, bad, edge or []


POSITIVE = _opts(
    [0.5, 30, 30.0, dt.timedelta(seconds=2)],
    [0, 0.0, -1, -0.5, NAN, True, False, dt.timedelta(0), *NOT_A_NUMBER],
    [INF, *HUGE, 5e-324],
)
NON_NEGATIVE = _opts(
    [0, 0.0, 1.5, dt.timedelta(seconds=1)],
    [-1, -1e-9, NAN, -INF, True, dt.timedelta(seconds=-1), *NOT_A_NUMBER],
    [INF, *HUGE],
)
CALLBACK = _opts([None, print], ["callback", 3, True])
NAME = _opts(["Name"], [3, b"x", True], ["", None])

STRATEGIES: dict[str, dict[str, tuple[list[Any], list[Any], list[Any]]]] = {
    "retry": {
        "max_retries": _opts([0, 1, 3, 1000], [-1, 1.5, NAN, True, False, *NOT_A_NUMBER], [10**30]),
        "delay": NON_NEGATIVE,
        "backoff": _opts(["constant", "linear", "exponential"], ["fast", 1, None, True, "Constant"]),
        "jitter": _opts([True, False], ["yes", None, 2.5], [0, 1]),
        "max_delay": _opts([None, 0, 5.0], [*NON_NEGATIVE[1][:-4], "1"], [INF, *HUGE]),
        "on_retry": CALLBACK,
        "name": NAME,
    },
    "timeout": {
        "timeout": POSITIVE,
        "on_timeout": CALLBACK,
        "name": NAME,
    },
    "circuit_breaker": {
        "failure_ratio": _opts([0.1, 0.5, 1, 1.0], [0, 0.0, -0.1, 1.1, 2, NAN, INF, True, *NOT_A_NUMBER], [5e-324]),
        "minimum_throughput": _opts([2, 100], [1, 0, -5, 2.5, NAN, True, *NOT_A_NUMBER], [10**30]),
        "sampling_duration": POSITIVE,
        "break_duration": POSITIVE,
        "on_opened": CALLBACK,
        "name": NAME,
    },
    "lock": {
        "key": _opts(["k", "ключ", "🔒 x"], ["", 3, None, True, b"k"]),
        "ttl": _opts(
            [0.001, 1, 1.5, 30.0, dt.timedelta(seconds=3)],
            [0, 0.0, 0.0009, -1, NAN, True, False, *NOT_A_NUMBER],
            [INF, *HUGE],
        ),
        "wait": NON_NEGATIVE,
        "cancel_on_lost": _opts([False, True], ["x", None, 2.5], [0, 1]),
        "on_lock_lost": CALLBACK,
        "name": NAME,
    },
}
POSITIONAL = {"timeout": "timeout", "lock": "key"}
DISPLAY = {"retry": "Retry", "timeout": "Timeout", "circuit_breaker": "CircuitBreaker", "lock": "Lock"}


@st.composite
def option_sets(draw: st.DrawFn, strategy: str) -> tuple[dict[str, Any], set[str], set[str]]:
    """Options for one strategy, and which of them are bad and which edge."""
    chosen: dict[str, Any] = {}
    bad: set[str] = set()
    edge: set[str] = set()
    for option, (good, wrong, unsure) in STRATEGIES[strategy].items():
        kind = draw(st.sampled_from(["omit", "good", "bad", "edge"] if unsure else ["omit", "good", "bad"]))
        if option == POSITIONAL.get(strategy) and kind == "omit":
            kind = "good"
        if kind == "omit":
            continue
        chosen[option] = draw(st.sampled_from({"good": good, "bad": wrong, "edge": unsure}[kind]))
        {"good": set(), "bad": bad, "edge": edge}[kind].add(option)
    return chosen, bad, edge


def _add(
    builder: ResiliencePipelineBuilder, strategy: str, options: dict[str, Any], store: Any
) -> ResiliencePipelineBuilder:
    options = dict(options)
    if strategy == "timeout":
        return builder.add_timeout(options.pop("timeout"), **options)
    if strategy == "lock":
        return builder.add_lock(options.pop("key"), store=store, **options)
    if strategy == "retry":
        return builder.add_retry(**options)
    return builder.add_circuit_breaker(**options)


def _named(problems: str, strategy: str, option: str) -> bool:
    return f"{DISPLAY[strategy]}.{option}" in problems or f"{option}:" in problems


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(st.sampled_from(list(STRATEGIES)), min_size=1, max_size=4).flatmap(
        lambda names: st.tuples(*(st.tuples(st.just(n), option_sets(n)) for n in names))
    )
)
def test_invalid_options_raise_validation_error_naming_each_at_build(drawn: tuple[Any, ...]) -> None:
    store = MemoryLockStore()
    builder = ResiliencePipelineBuilder()
    for strategy, (options, _, _) in drawn:
        builder = _add(builder, strategy, options, store)  # adding never validates nor raises
    bad = [(strategy, option) for strategy, (_, wrong, _) in drawn for option in wrong]
    edge = [(strategy, option) for strategy, (_, _, unsure) in drawn for option in unsure]
    try:
        pipeline = builder.build()
    except ValidationError as exc:  # the raise is optional: edge values may build
        text, problems = str(exc), exc.problems
        for strategy, option in bad:
            assert _named(text, strategy, option), (strategy, option, text)
        named = bad + edge
        assert all(any(_named(problem, s, o) for s, o in named) for problem in problems), (problems, named)
    else:
        assert not bad, f"built with bad options {bad}"
        locks = sum(strategy == "lock" for strategy, _ in drawn)  # two on one key: not reentrant
        if not edge and locks <= 1 and all("on_" not in o for _, (opts, _, _) in drawn for o in opts):
            assert pipeline.execute(lambda: 7) == 7
    assert len(store) == 0


KEYS = st.one_of(
    st.text(min_size=0, max_size=50),
    st.text(alphabet=st.characters(codec="utf-8"), min_size=1, max_size=20),
    st.sampled_from(
        [
            "",
            " ",
            "\x00",
            "a\x00b",
            "\ud800",
            "x\udfffy",
            "{",
            "}",
            "{a}",
            "'); redis.call('FLUSHALL') --",
            "🔒" * 1000,
            "k" * 100_000,
        ]
    ),
)


def _key_outcome(pipeline_key: str, store: Any) -> str:
    try:
        pipeline = ResiliencePipelineBuilder().add_lock(pipeline_key, ttl=5, store=store).build()
    except ValidationError:
        return "rejected at build"
    try:
        assert pipeline.execute(lambda: "ran") == "ran"
    except ValidationError:
        return "rejected at run"
    return "ran"


@settings(max_examples=150, deadline=None)
@given(KEYS)
def test_any_key_works_or_is_rejected_clearly_in_memory(key: str) -> None:
    store = MemoryLockStore()
    outcome = _key_outcome(key, store)
    assert outcome == "ran" or key == "" or not key.isprintable(), (key, outcome)
    assert len(store) == 0


@pytest.mark.redis
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(key=KEYS)
def test_any_key_works_or_is_rejected_clearly_on_redis(redis_server: Any, key: str) -> None:
    client = redis.Redis(port=redis_server.port)
    prefix = f"bad-input-{uuid.uuid4().hex}"
    store = RedisLockStore(client, prefix=prefix)
    try:
        _key_outcome(key, store)
        leftovers = list(client.scan_iter(match=f"{prefix}:*", count=1000))
        assert all(client.pttl(k) > 0 for k in leftovers)  # tombstones expire
        assert not any(client.hexists(k, "owner") for k in leftovers)  # nothing held
    finally:
        store.close()
        client.close()


@pytest.mark.redis
async def test_a_key_redis_cannot_encode_is_a_validation_error_sync_and_async(redis_server: Any) -> None:
    """Regression: a lone surrogate used to escape as UnicodeEncodeError from the Redis store."""
    import redis.asyncio

    client, async_client = redis.Redis(port=redis_server.port), redis.asyncio.Redis(port=redis_server.port)
    store = RedisLockStore(client, async_client=async_client)
    try:
        with pytest.raises(ValidationError, match="cannot be sent to Redis"):
            store.acquire("bad\ud800key", "owner", 5)
        with pytest.raises(ValidationError, match="cannot be sent to Redis"):
            await store.acquire_async("bad\ud800key", "owner", 5)
        pipeline = ResiliencePipelineBuilder().add_lock("x\udfff", ttl=5, store=store).build()
        with pytest.raises(ValidationError):
            await pipeline.execute_async(_noop)
        with pytest.raises(ValidationError, match="cannot be sent to Redis"):
            RedisSemaphoreStore(client).acquire("bad\ud800key", "owner", 5, 2)
        assert store.acquire("fine", "owner", 5) is not None  # the connection is still usable
        assert store.release("fine", "owner")
    finally:
        await store.aclose()
        await async_client.aclose()
        client.close()


async def _noop() -> None:
    return None
