"""The three rate-limit decisions as pure code: state and `now` in, new state and a wait out.

Every function answers one question — may `permits` permits be taken at `now`? — with the
seconds until they could be (0.0: granted) and the state to keep. Nothing here reads a clock,
sleeps or locks: `MemoryRateLimitStore` applies them under its lock on its time provider's
clock, and the Redis scripts (`_redis_scripts.py`) are the same arithmetic in Lua, on the
server's clock, in microseconds.

- **Token bucket (GCRA).** The state is the theoretical arrival time `tat`: when the bucket
  would be full again. A permit costs `interval = per / limit` seconds; the bucket holds
  `burst` permits, so a request is granted when `tat + cost - burst * interval <= now`.
  Retry-after is exact: the moment that inequality becomes true.
- **Sliding window (log).** The state is the grant times of the last `per` seconds, oldest
  first. A request is granted when fewer than `limit - permits + 1` grants are younger than
  `per`; otherwise it waits until enough of the oldest leave the window. In every interval of
  length `per`, at most `limit` permits are granted.
- **Fixed window.** The state is `[window end, permits taken]`. A window opens at the first
  request after the previous one ended and lasts `per`; it grants up to `limit` permits.

`EPSILON` absorbs binary rounding (`0.1 * 3 != 0.3`): a wait shorter than a nanosecond counts
as none, so a caller that sleeps exactly the retry-after it was told is granted.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final, Literal, TypeAlias

if TYPE_CHECKING:
    from collections import deque

__all__ = [
    "ALGORITHMS",
    "EPSILON",
    "RateLimitAlgorithm",
    "capacity",
    "check_take",
    "fixed_window",
    "sliding_window",
    "token_bucket",
]

RateLimitAlgorithm: TypeAlias = Literal["token_bucket", "sliding_window", "fixed_window"]
"""The rate limiter's algorithms: GCRA token bucket, sliding window (log), fixed window."""

ALGORITHMS: Final = ("token_bucket", "sliding_window", "fixed_window")

EPSILON: Final = 1e-9
"""Waits at or below this many seconds are rounding noise: the permit is granted."""


def capacity(limit: int, burst: int | None, algorithm: str) -> int:
    """The most permits one request can ever get: `burst` (token bucket) or `limit` (windows)."""
    if algorithm == "token_bucket" and burst is not None:
        return burst
    return limit


def check_take(  # noqa: PLR0917 - the arguments of `take`, in its order
    key: object, limit: object, per: object, burst: object, algorithm: object, permits: object
) -> str | None:
    """What is wrong with the arguments of `take`, as `"<argument>: <what>"`; None if nothing."""
    if not isinstance(key, str):
        return f"key: must be a str, got {type(key).__name__}"
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        return f"limit: must be an int >= 1, got {limit!r}"
    if isinstance(per, bool) or not isinstance(per, int | float) or not 0 < per < float("inf"):
        return f"per: must be a positive, finite number of seconds, got {per!r}"
    if burst is not None and (isinstance(burst, bool) or not isinstance(burst, int) or burst < 1):
        return f"burst: must be None or an int >= 1, got {burst!r}"
    if algorithm not in ALGORITHMS:
        return f"algorithm: must be one of {', '.join(map(repr, ALGORITHMS))}, got {algorithm!r}"
    if isinstance(permits, bool) or not isinstance(permits, int) or permits < 1:
        return f"permits: must be an int >= 1, got {permits!r}"
    most = capacity(limit, burst, algorithm)
    if permits > most:
        return f"permits: {permits} can never be granted: at most {most} at once (the {algorithm}'s capacity)"
    return None


def token_bucket(tat: float | None, now: float, interval: float, burst: int, permits: int) -> tuple[float, float]:
    """GCRA: `(state to keep, seconds to wait)`; a wait of 0.0 means granted.

    `tat` is the stored theoretical arrival time (None: a full bucket), `interval` the
    seconds one permit costs (`per / limit`). When refused, the state is returned unchanged.
    """
    base = now if tat is None or tat < now else tat
    new_tat = base + interval * permits
    wait = new_tat - interval * burst - now
    if wait > EPSILON:
        return base if tat is None else tat, wait
    return new_tat, 0.0


def sliding_window(log: deque[float], now: float, per: float, limit: int, permits: int) -> float:
    """Sliding log: drop the grants older than `per`, then grant (appending `now`) or say how long to wait.

    `log` holds the grant times, oldest first, one entry per permit; it is updated in place.
    """
    while log and log[0] + per <= now + EPSILON:
        log.popleft()
    over = len(log) + permits - limit
    if over > 0:
        # The `over` oldest grants must leave the window; the last of them leaves at log[over-1] + per.
        return log[over - 1] + per - now
    log.extend([now] * permits)
    return 0.0


def fixed_window(
    window: list[float] | None, now: float, per: float, limit: int, permits: int
) -> tuple[list[float], float]:
    """Fixed window: `([window end, permits taken], seconds to wait)`; a wait of 0.0 means granted.

    A window opens at the first request after the previous one ended (`window` None or past)
    and lasts `per` seconds; a refused request waits for the window's end.
    """
    if window is None or window[0] <= now + EPSILON:
        window = [now + per, 0]
    taken = window[1] + permits
    if taken > limit:
        return window, window[0] - now
    window[1] = taken
    return window, 0.0
