"""`RedisRateLimitStore`: rate limits shared by every process that talks to one Redis (or Cluster).

One decision is one `EVALSHA` of the algorithm's script (`_redis_scripts.py`) on one key, run
by the same script runner as the lock stores (`EVAL` once per script and server after a
NOSCRIPT answer). redis-py is never imported here.
"""

from __future__ import annotations

from typing import Any, cast

from resilience.exceptions import ValidationError
from resilience.limiters._algorithms import RateLimitAlgorithm, capacity, check_take, interval_us, typed
from resilience.limiters._redis_scripts import SCRIPTS
from resilience.stores._redis import RedisClientsStore

__all__ = ["RedisRateLimitStore"]


class RedisRateLimitStore(RedisClientsStore):
    """A rate-limit store over Redis: one key per partition, one script call per decision.

    Args:
        client: a sync client (`redis.Redis`, `redis.cluster.RedisCluster`, valkey alike) or a
            zero-argument factory of one; enables `take`.
        async_client: an asyncio client, an awaitable of one, or a sync or async zero-argument
            factory of one; enables `take_async`.
        prefix: the key namespace: a partition's key is `<prefix>:<algorithm>:<key>`.

    Only the server's clock decides (`TIME`), so the fleet's clocks need not agree. Each key
    expires when its state would no longer matter (a full bucket, a window's end), so idle
    partitions cost nothing. Decisions are atomic: no process can over-admit. The clients
    stay yours (`close()` closes nothing of them).
    """

    def __init__(self, client: Any = None, *, async_client: Any = None, prefix: str = "ratelimit") -> None:
        super().__init__("RedisRateLimitStore", client, async_client, prefix)
        self._prepared: dict[tuple[object, ...], tuple[Any, list[object]]] = {}

    def key(self, key: str, algorithm: str = "token_bucket") -> str:
        """The Redis key of partition `key` under `algorithm`."""
        return f"{self._prefix}:{algorithm}:{key}"

    def _arguments(self, key: object, arguments: tuple[object, ...]) -> tuple[Any, list[object]]:
        """The script and its ARGV for these `take` arguments (checked once, then remembered)."""
        prepared = self._prepared.get(typed(arguments))
        if prepared is not None and type(key) is str:
            return prepared
        if (problem := check_take(key, *arguments)) is not None:
            raise ValidationError(problem)
        limit, per, burst, algorithm, permits = cast("tuple[int, float, int | None, str, int]", arguments)  # checked
        # ARGV: the token bucket's cost of a permit or a window's length (us), its capacity, the permits.
        first = interval_us(per, limit) if algorithm == "token_bucket" else per * 1_000_000
        prepared = (SCRIPTS[algorithm], [first, capacity(limit, burst, algorithm), permits])
        if len(self._prepared) < 256:
            self._prepared[typed(arguments)] = prepared
        return prepared

    def take(  # noqa: PLR0917 - the protocol's positional signature
        self,
        key: str,
        limit: int,
        per: float,
        burst: int | None = None,
        algorithm: RateLimitAlgorithm = "token_bucket",
        permits: int = 1,
    ) -> float:
        """Take `permits` permits of `key` if free: 0.0, else the seconds until they are (see `RateLimitStore`)."""
        script, argv = self._arguments(key, (limit, per, burst, algorithm, permits))
        return int(self._run("take", script, ([self.key(key, algorithm)], argv))) / 1_000_000

    async def take_async(  # noqa: PLR0917 - the protocol's positional signature
        self,
        key: str,
        limit: int,
        per: float,
        burst: int | None = None,
        algorithm: RateLimitAlgorithm = "token_bucket",
        permits: int = 1,
    ) -> float:
        """See `take`."""
        script, argv = self._arguments(key, (limit, per, burst, algorithm, permits))
        return int(await self._run_async("take_async", script, ([self.key(key, algorithm)], argv))) / 1_000_000
