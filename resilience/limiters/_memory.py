"""`MemoryRateLimitStore`: the rate limits of one process, on its time provider's clock."""

from __future__ import annotations

import functools
import threading
from collections import deque
from typing import TYPE_CHECKING, Final

from resilience._time import SYSTEM_TIME, monotonic_source
from resilience.exceptions import ValidationError
from resilience.limiters._algorithms import check_take, fixed_window, sliding_window, token_bucket, typed

if TYPE_CHECKING:
    from collections.abc import Callable

    from resilience._time import TimeProvider
    from resilience.limiters._algorithms import RateLimitAlgorithm

__all__ = ["MemoryRateLimitStore"]

_SWEEP_AT: Final = 1024
"""Partitions held before the first sweep of idle ones (then twice the live count)."""


class MemoryRateLimitStore:
    """Rate limits kept in this process: thread-safe, sync and asyncio, exact on its clock.

    Args:
        time_provider: the clock the limits run on (default: the system clock). In tests pass
            a `FakeTimeProvider`: decisions are then exact to the nanosecond on the fake clock.

    Partitions (`key`, per algorithm) whose state has expired — a full bucket, a window that
    ended, a log whose grants all left it — are dropped, so memory stays bounded when keys are
    not. A sliding window keeps one timestamp per permit granted in the last `per` seconds.
    """

    __slots__ = ("_buckets", "_deciders", "_lock", "_logs", "_next_sweep", "_time", "_windows")

    def __init__(self, time_provider: TimeProvider | None = None) -> None:
        self._time: TimeProvider = time_provider if time_provider is not None else SYSTEM_TIME
        self._lock = threading.Lock()
        self._buckets: dict[str, float] = {}
        self._windows: dict[str, list[float]] = {}
        self._logs: dict[str, tuple[deque[float], float]] = {}  # the log and its `per`
        # The decision of each set of arguments already checked (`typed`): the per-call check
        # then costs one dictionary lookup.
        self._deciders: dict[tuple[object, ...], Callable[[str], float]] = {}
        self._next_sweep = _SWEEP_AT

    @property
    def time_provider(self) -> TimeProvider:
        """The clock the limits run on."""
        return self._time

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
        arguments = (limit, per, burst, algorithm, permits)
        decide = self._deciders.get(typed(arguments))
        if decide is None or type(key) is not str:
            decide = self._decider(limit, per, burst, algorithm, permits, key=key)
            if len(self._deciders) < 256:  # bounded, whatever callers pass
                self._deciders[typed(arguments)] = decide
        return decide(key)

    # The clock is read under the lock, so that decisions apply in the order of their `now`.

    def _sliding_window(self, key: str, per: float, limit: int, permits: int) -> float:
        with self._lock:
            now = self._time.monotonic()
            entry = self._logs.get(key)
            if entry is None:
                entry = self._logs[key] = (deque(), per)
                if len(self._logs) >= self._next_sweep:
                    self._sweep(now)
            return sliding_window(entry[0], now, per, limit, permits)

    def _fixed_window(self, key: str, per: float, limit: int, permits: int) -> float:
        with self._lock:
            now = self._time.monotonic()
            window, wait = fixed_window(self._windows.get(key), now, per, limit, permits)
            self._windows[key] = window
            if len(self._windows) >= self._next_sweep:
                self._sweep(now)
        return wait

    def _decider(
        self,
        limit: int,
        per: float,
        burst: int | None,
        algorithm: RateLimitAlgorithm,
        permits: int = 1,
        *,
        key: object = "",
    ) -> Callable[[str], float]:
        """`take(key, limit, per, burst, algorithm, permits)` as a function of `key` alone, arguments checked now.

        `take` keeps one for each set of arguments (checking its caller's `key` here too); the
        rate limiter strategy calls its own on its hot path: no argument tuple, no lookups.
        """
        problem = check_take(key, limit, per, burst, algorithm, permits)
        if problem is not None:
            raise ValidationError(problem)
        if algorithm == "sliding_window":
            return functools.partial(self._sliding_window, per=per, limit=limit, permits=permits)
        if algorithm == "fixed_window":
            return functools.partial(self._fixed_window, per=per, limit=limit, permits=permits)
        lock = self._lock
        clock = monotonic_source(self._time)  # without the provider's method frame: a tenth of the decision
        buckets = self._buckets  # swept in place, never replaced
        decide = token_bucket
        interval = per / limit
        capacity = limit if burst is None else burst

        def take_token(key: str) -> float:
            with lock:
                now = clock.monotonic()
                tat, wait = decide(buckets.get(key), now, interval, capacity, permits)
                if not wait:
                    buckets[key] = tat
                    if len(buckets) >= self._next_sweep:
                        self._sweep(now)
            return wait

        return take_token

    async def take_async(  # noqa: PLR0917 - the protocol's positional signature
        self,
        key: str,
        limit: int,
        per: float,
        burst: int | None = None,
        algorithm: RateLimitAlgorithm = "token_bucket",
        permits: int = 1,
    ) -> float:
        """See `take` (never blocks: the decision is a few dictionary operations under a lock)."""
        return self.take(key, limit, per, burst, algorithm, permits)

    def _sweep(self, now: float) -> None:
        """Drop every partition whose state has expired (called under the lock)."""
        # In place: the strategies' deciders hold on to these dictionaries.
        for key in [key for key, tat in self._buckets.items() if tat <= now]:
            del self._buckets[key]
        for key in [key for key, window in self._windows.items() if window[0] <= now]:
            del self._windows[key]
        for key in [key for key, (log, per) in self._logs.items() if not log or log[-1] + per <= now]:
            del self._logs[key]
        live = max(len(self._buckets), len(self._windows), len(self._logs))
        self._next_sweep = max(_SWEEP_AT, 2 * live)

    def __len__(self) -> int:
        """How many partitions hold state (expired ones until the next sweep)."""
        with self._lock:
            return len(self._buckets) + len(self._windows) + len(self._logs)

    def __repr__(self) -> str:
        return f"MemoryRateLimitStore(time_provider={self._time!r})"
