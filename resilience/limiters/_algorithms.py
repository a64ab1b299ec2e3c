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

from resilience._validation import MAX_DURATION

if TYPE_CHECKING:
    from collections import deque

__all__ = [
    "ALGORITHMS",
    "EPSILON",
    "RateLimitAlgorithm",
    "capacity",
    "check_rate",
    "check_take",
    "fixed_window",
    "interval_us",
    "sliding_window",
    "token_bucket",
    "typed",
]

RateLimitAlgorithm: TypeAlias = Literal["token_bucket", "sliding_window", "fixed_window"]
"""The rate limiter's algorithms: GCRA token bucket, sliding window (log), fixed window."""

ALGORITHMS: Final = ("token_bucket", "sliding_window", "fixed_window")

EPSILON: Final = 1e-9
"""Waits at or below this many seconds are rounding noise: the permit is granted."""


MIN_PER: Final = 1e-6
"""The shortest `per` (seconds): the Redis scripts count in microseconds of the server's clock."""
MAX_COUNT: Final = 2**53
"""`limit`, `burst` and `permits` stay below this: exact as the doubles Lua keeps them in."""
MAX_LOG: Final = 100_000
"""The sliding window's largest `limit`: it keeps one entry per permit (about 1 MB on Redis)."""
MAX_LOG_PERMITS: Final = 1_000
"""The most permits one sliding-window request takes: each is an entry written in the decision,
so a decision stays near a millisecond of the server's time (expired entries go in one trim)."""


def check_rate(limit: int, per: float, burst: int | None, algorithm: str) -> tuple[str, str] | None:
    """What makes valid-looking rate options unservable, as `(option, what)`; None if nothing.

    The bounds are what the stores can keep exactly: `per` from a microsecond to `MAX_DURATION`;
    counts below 2**53; the token bucket at most one permit per microsecond (its interval, in the
    server's microseconds, must outweigh the rounding of a 1.7e15 timestamp) and full again
    within `MAX_DURATION`; the sliding window's log at most `MAX_LOG` entries.
    """
    if not MIN_PER <= per <= MAX_DURATION:
        return "per", f"must be between {MIN_PER:g} and {MAX_DURATION:g} seconds, got {per!r}"
    for option, count in (("limit", limit), ("burst", burst)):
        if count is not None and count >= MAX_COUNT:
            return option, f"must be below 2**53, got {count!r}"
    if algorithm == "token_bucket":
        # In microseconds, computed as the Redis store sends it, so that this check and the
        # script's agree to the last bit (1e15 / 5345 * 5345 exceeds 1e15).
        if (interval := interval_us(per, limit)) < 1:
            return "limit", f"at most one permit per microsecond: {limit} per {per:g} s is too many"
        if interval * (limit if burst is None else burst) > MAX_DURATION * 1_000_000:
            return "burst", f"the bucket must refill within {MAX_DURATION:g} seconds: {burst} at {limit} per {per:g} s"
    elif algorithm == "sliding_window" and limit > MAX_LOG:
        return "limit", (
            f"the sliding window keeps one entry per permit: at most {MAX_LOG}, got {limit} "
            "(token_bucket or fixed_window take any limit)"
        )
    return None


def interval_us(per: float, limit: int) -> float:
    """The token bucket's cost of one permit, in microseconds (what the Redis script is given)."""
    return per * 1_000_000 / limit


def typed(arguments: tuple[object, ...]) -> tuple[object, ...]:
    """`arguments` with their types: a key for checked arguments under which `True` is not `1`.

    A bool, an `IntEnum` or a numpy integer equals (and hashes as) the int it stands for, so a
    cache keyed by the values alone would pass them unchecked.
    """
    return (*arguments, *map(type, arguments))


def capacity(limit: int, burst: int | None, algorithm: str) -> int:
    """The most permits one request can ever get: `burst` (token bucket) or `limit` (windows)."""
    return burst if algorithm == "token_bucket" and burst is not None else limit


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
    assert isinstance(per, int | float)
    if (rate := check_rate(limit, per, burst, algorithm)) is not None:
        return f"{rate[0]}: {rate[1]}"
    if algorithm == "sliding_window" and permits > MAX_LOG_PERMITS:
        return f"permits: at most {MAX_LOG_PERMITS} at once in the sliding window (one entry each), got {permits}"
    if permits > (most := capacity(limit, burst, algorithm)):
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
