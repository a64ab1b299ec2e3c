"""Rate-limit stores: where the rate limiter keeps its partitions, in one process or in Redis.

- `RateLimitStore` / `AsyncRateLimitStore`: one atomic decision per call,
  `take(key, limit, per, burst, algorithm, permits=1) -> float` (0.0: granted; else the
  seconds until the permits are free).
- `MemoryRateLimitStore(time_provider=None)`: in-process, thread-safe, exact on its clock.
- `RedisRateLimitStore(client=None, *, async_client=None, prefix="ratelimit")`: shared by a
  fleet; one Lua script per algorithm, the server's clock only, one key per partition.

The algorithms: `"token_bucket"` (GCRA, capacity `burst`), `"sliding_window"` (a log: at most
`limit` permits in any `per` seconds) and `"fixed_window"` (a window opens at the first request
and grants `limit` permits for `per` seconds).
"""

from resilience.limiters._algorithms import RateLimitAlgorithm
from resilience.limiters._memory import MemoryRateLimitStore
from resilience.limiters._protocols import AsyncRateLimitStore, RateLimitStore
from resilience.limiters._redis import RedisRateLimitStore

__all__ = [
    "AsyncRateLimitStore",
    "MemoryRateLimitStore",
    "RateLimitAlgorithm",
    "RateLimitStore",
    "RedisRateLimitStore",
]
