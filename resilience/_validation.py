"""Option checks shared by every strategy and primitive: one wording for every problem.

A `Problems` collects what is wrong, each as `"<option>: <what is wrong>"`, so that `build()`
can report every bad option of every strategy at once (`ValidationError.problems`).
`generated_seconds` checks, at run time, the durations that the `*_generator` callbacks return.
"""

from __future__ import annotations

import datetime as dt
import math
from typing import TYPE_CHECKING, TypeAlias

from resilience.exceptions import ValidationError

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = [
    "MAX_DURATION",
    "Duration",
    "Problems",
    "check_semaphore_permits",
    "generated_seconds",
    "to_seconds",
    "ttl_ms",
]

Duration: TypeAlias = "int | float | dt.timedelta"
"""A duration in: seconds as `int`/`float`, or a `timedelta` (never a `bool`)."""


MAX_DURATION = 1e9
"""The longest duration any option takes (about 31.7 years): every timer, wait, Redis expiry and
PostgreSQL lease end built from it stays far inside what `threading`, asyncio, `PEXPIRE` and a
timestamp (`clock_timestamp()` plus it) accept."""


def ttl_ms(ttl: object) -> int:
    """A store's ttl in whole milliseconds, rounded up (1 ms at least); at most `MAX_DURATION` seconds."""
    # `type() is` keeps bool out and costs less than isinstance on this hot path; the
    # comparison chain is False for NaN and infinity.
    if (type(ttl) is float or type(ttl) is int) and 0 < ttl <= MAX_DURATION:
        # The 1e-9 keeps binary noise (0.29 * 1000 == 290.00000000000006) from adding a millisecond.
        return max(1, math.ceil(ttl * 1000 - 1e-9))
    msg = f"ttl: must be a positive number of seconds, at most {MAX_DURATION:g}, got {ttl!r}"
    raise ValidationError(msg)


def to_seconds(value: Duration) -> float:
    """Seconds as a float (for a value `Problems.duration` accepted)."""
    if isinstance(value, dt.timedelta):
        return value.total_seconds()
    return float(value)


def generated_seconds(value: object, default: float, generator: str, expected: str) -> float:
    """Seconds from what the user's `generator` callback returned: a number or a timedelta, not NaN.

    None gives `default`; anything else raises `ValidationError("<generator> returned <value>:
    return <expected>")`.
    """
    if value is None:
        return default
    if isinstance(value, dt.timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, int | float) and not isinstance(value, bool):
        try:
            seconds = float(value)
        except OverflowError:  # an int no float can hold: as a number, it is infinite
            seconds = math.inf
    else:
        seconds = math.nan
    if math.isnan(seconds):
        msg = f"{generator} returned {'NaN' if isinstance(value, float) else repr(value)}: return {expected}"
        raise ValidationError(msg)
    return seconds


def wrong_store(store: object, wanted: str, module: str, requirement: str) -> str:
    """What to say about a `store=` of the wrong kind: the line to write for a redis client, never a repr.

    `wanted` is the store class to wrap a client in (`RedisLockStore`), importable from `module`;
    `requirement` says what any other value must be ("must implement LockStore ...").
    """
    kind = type(store)
    name = f"{kind.__module__}.{kind.__qualname__}"
    top = kind.__module__.partition(".")[0]
    if top in {"redis", "valkey"}:
        call = f"{wanted}(async_client=client)" if ".asyncio" in kind.__module__ else f"{wanted}(client)"
        return f"got a {top} client ({name}), not a store: pass {call} (from {module} import {wanted})"
    return f"{requirement}, got {name}"


def check_semaphore_permits(limit: object, permits: object, *, limit_below: float = math.inf) -> int:
    """`permits` when `1 <= permits <= limit` (both ints, `limit` below `limit_below`); else `ValidationError`.

    The one check of a semaphore's `limit` and `permits`, in every store and the primitive,
    made before any state changes.
    """
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit < limit_below:
        msg = f"limit: must be an int >= 1, got {limit!r}"
        raise ValidationError(msg)
    if isinstance(permits, bool) or not isinstance(permits, int) or not 1 <= permits <= limit:
        msg = f"permits: must be an int between 1 and the limit ({limit}), got {permits!r}"
        raise ValidationError(msg)
    return permits


def _describe(value: object) -> str:
    if isinstance(value, dt.timedelta):  # its repr normalises: timedelta(days=-1, seconds=86395) for -5 s
        return f"timedelta(seconds={value.total_seconds():g})"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


class Problems:
    """Collects option problems; `prefix` is prepended (e.g. `"Retry."`)."""

    __slots__ = ("items", "prefix")

    def __init__(self, prefix: str = "") -> None:
        self.prefix = prefix
        self.items: list[str] = []

    def __bool__(self) -> bool:
        return bool(self.items)

    def add(self, option: str, message: str) -> None:
        """Record that `option` is wrong."""
        self.items.append(f"{self.prefix}{option}: {message}")

    def duration(
        self,
        option: str,
        value: object,
        *,
        positive: bool = False,
        minimum: float | None = None,
        allow_none: bool = False,
        allow_inf: bool = False,
    ) -> float | None:
        """Check a duration; return it in seconds when valid, else record why and return None."""
        if value is None and allow_none:
            return None
        if isinstance(value, bool) or not isinstance(value, int | float | dt.timedelta):  # None too
            problem = "must be a duration (int, float or timedelta)"
        elif (seconds := self._seconds(option, value)) is None:
            return None
        elif math.isinf(seconds) and not (allow_inf and seconds > 0):
            problem = "must be finite"
        elif seconds > MAX_DURATION and not (allow_inf and math.isinf(seconds)):
            problem = f"must be at most {MAX_DURATION:g} seconds (about 31 years)"
        elif minimum is not None and seconds < minimum:
            problem = f"must be >= {minimum:g} seconds"
        elif positive and seconds <= 0:
            problem = "must be > 0"
        elif seconds < 0:
            problem = "must be >= 0"
        else:
            return seconds
        self.add(option, f"{problem}, got {_describe(value)}")
        return None

    def _seconds(self, option: str, value: Duration) -> float | None:
        """`value` in seconds, or None (recorded) for NaN and an int no float can hold (10**400)."""
        try:
            seconds = to_seconds(value)
        except OverflowError:
            bound = f"be at most {MAX_DURATION:g} seconds" if isinstance(value, int) and value > 0 else "be >= 0"
            self.add(option, f"must {bound}, got {_describe(value)}")
            return None
        if math.isnan(seconds):
            self.add(option, "must be a number, got NaN")
            return None
        return seconds

    def integer(self, option: str, value: object, *, minimum: int) -> int | None:
        """Check an `int` (never a `bool`) of at least `minimum`."""
        if isinstance(value, bool) or not isinstance(value, int):
            self.add(option, f"must be an int, got {_describe(value)}")
            return None
        if value < minimum:
            self.add(option, f"must be >= {minimum}, got {value}")
            return None
        return value

    def boolean(self, option: str, value: object) -> bool:
        """Check a `bool` (an int or a string is a mistake there); whether it is one."""
        if isinstance(value, bool):
            return True
        self.add(option, f"must be a bool, got {value!r}")
        return False

    def callable(self, option: str, value: object, *, allow_none: bool = True) -> Callable[..., object] | None:
        """Check an optional callable."""
        if value is None:
            if not allow_none:
                self.add(option, "is required")
            return None
        if not callable(value):
            self.add(option, f"must be callable, got {_describe(value)}")
            return None
        return value

    def name(self, option: str, value: object, *, allow_none: bool = False) -> None:
        """Check a non-empty string name."""
        if value is None and allow_none:
            return
        if not isinstance(value, str) or not value:
            self.add(option, f"must be a non-empty string, got {_describe(value)}")
