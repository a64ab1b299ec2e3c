"""redis-py clients with the timeouts a lock, limiter or circuit store needs, and the check for them.

redis-py's defaults (a 5 s socket timeout and, from redis-py 6 on, a retry that repeats a failed
call up to ten times) let one call to a frozen server block its caller for about a minute;
docs/ttl-and-timeouts.md explains the numbers these helpers use.
"""

from __future__ import annotations

import logging
import math
from typing import Any

from resilience.exceptions import ValidationError

__all__ = ["async_redis_client", "redis_client", "warn_if_untimed"]

_logger = logging.getLogger("resilience")
_warned: set[str] = set()


def _options(timeout: float, retries: int, retry_class: Any, options: dict[str, Any]) -> dict[str, Any]:
    given: tuple[object, object] = (timeout, retries)  # checked at run time: callers need not be typed
    if isinstance(given[0], bool) or not isinstance(given[0], int | float) or not 0 < given[0] < math.inf:
        msg = f"timeout: must be a positive number of seconds, got {timeout!r}"
        raise ValidationError(msg)
    if isinstance(given[1], bool) or not isinstance(given[1], int) or given[1] < 0:
        msg = f"retries: must be an int >= 0, got {retries!r}"
        raise ValidationError(msg)
    from redis.backoff import NoBackoff

    retry = retry_class(NoBackoff(), retries)
    return {"socket_timeout": timeout, "socket_connect_timeout": timeout, "retry": retry} | options


def redis_client(url: str, *, timeout: float = 3.0, retries: int = 1, cluster: bool = False, **options: Any) -> Any:
    """A sync redis-py client for a store: `redis.Redis.from_url(url, ...)` with short timeouts.

    Each call (and each connect) gives up after `timeout` seconds (3 s suits the default 30 s
    ttl: keep it well below ttl/3, e.g. ttl/10), and a failed call is repeated at most `retries`
    times, at once: the lease engine does the rest. `cluster=True` builds a `RedisCluster`.
    Other keywords go to redis-py unchanged and win over these.
    """
    import redis.cluster
    import redis.retry

    kind = redis.cluster.RedisCluster if cluster else redis.Redis
    return kind.from_url(url, **_options(timeout, retries, redis.retry.Retry, options))


def async_redis_client(
    url: str, *, timeout: float = 3.0, retries: int = 1, cluster: bool = False, **options: Any
) -> Any:
    """The asyncio twin of `redis_client`: `redis.asyncio.Redis.from_url(url, ...)`, same timeouts."""
    import redis.asyncio.cluster
    import redis.asyncio.retry

    kind = redis.asyncio.cluster.RedisCluster if cluster else redis.asyncio.Redis
    return kind.from_url(url, **_options(timeout, retries, redis.asyncio.retry.Retry, options))


def warn_if_untimed(client: object, owner: str) -> None:
    """Log once per store class when `client` may block a caller far longer than a ttl.

    That is a client without a socket timeout (a call to a frozen server waits for ever), or
    one whose retry repeats a failed call more than once (redis-py 8's default: ten times five
    seconds). A client that does not say (not redis-py or valkey) is not judged.
    """
    if owner in _warned:
        return
    read = getattr(client, "get_connection_kwargs", None)
    settings = read() if callable(read) else None
    if not isinstance(settings, dict) or "socket_timeout" not in settings:
        return
    count = getattr(settings.get("retry"), "get_retries", None)
    retries = count() if callable(count) else 0
    problems = []
    if settings["socket_timeout"] is None:
        problems.append("no socket_timeout (a call to a frozen server waits for ever)")
    if isinstance(retries, int) and retries > 1:
        problems.append(f"a retry that repeats a failed call {retries} times")
    if problems:
        _warned.add(owner)
        _logger.warning(
            "%s: the Redis client has %s; a caller can wait far longer than the ttl. Build it with "
            "resilience.stores.redis_client(url) (docs/ttl-and-timeouts.md)",
            owner,
            " and ".join(problems),
        )
