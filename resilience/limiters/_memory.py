"""`MemoryRateLimitStore`: the rate limits of one process, on its time provider's clock."""

from __future__ import annotations

import functools
import threading
from collections import deque
from typing import TYPE_CHECKING, Final

from resilience._time import SYSTEM_TIME, monotonic_source
from resilience.exceptions import ValidationError
from resilience.limiters._algorithms import check_take, fixed_window, sliding_window, token_bucket, typed
from resilience.stores._steps import inline_twin

if TYPE_CHECKING:
    from collections.abc import Callable

    from resilience._time import TimeProvider
    from resilience.limiters._algorithms import RateLimitAlgorithm

__all__ = ["MemoryRateLimitStore"]

_SWEEP_AT: Final = 1024
"""Partitions held before the first sweep of idle ones (then twice the live count)."""


class _Partitions:
    """The partitions' state and its lock: what the deciders decide on.

    The deciders hold this, never the store, so that the store's cache of them makes no
    reference cycle: a dropped store is freed at once.
    """

    __slots__ = ("buckets", "lock", "logs", "next_sweep", "time", "windows")

    def __init__(self, time_provider: TimeProvider) -> None:
        self.time = time_provider
        self.lock = threading.Lock()
        self.buckets: dict[str, float] = {}
        self.windows: dict[str, list[float]] = {}
        self.logs: dict[str, tuple[deque[float], float]] = {}  # the log and its `per`
        self.next_sweep = _SWEEP_AT

    # The clock is read under the lock, so that decisions apply in the order of their `now`.

    def sliding_window(self, key: str, per: float, limit: int, permits: int) -> float:
        with self.lock:
            now = self.time.monotonic()
            entry = self.logs.get(key)
            if entry is None:
                entry = self.logs[key] = (deque(), per)
                if len(self.logs) >= self.next_sweep:
                    self.sweep(now)
            return sliding_window(entry[0], now, per, limit, permits)

    def fixed_window(self, key: str, per: float, limit: int, permits: int) -> float:
        with self.lock:
            now = self.time.monotonic()
            window, wait = fixed_window(self.windows.get(key), now, per, limit, permits)
            self.windows[key] = window
            if len(self.windows) >= self.next_sweep:
                self.sweep(now)
        return wait

    def sweep(self, now: float) -> None:
        """Drop every partition whose state has expired (called under the lock)."""
        # In place: the token bucket's deciders hold on to `buckets`.
        for key in [key for key, tat in self.buckets.items() if tat <= now]:
            del self.buckets[key]
        for key in [key for key, window in self.windows.items() if window[0] <= now]:
            del self.windows[key]
        for key in [key for key, (log, per) in self.logs.items() if not log or log[-1] + per <= now]:
            del self.logs[key]
        live = max(len(self.buckets), len(self.windows), len(self.logs))
        self.next_sweep = max(_SWEEP_AT, 2 * live)


class MemoryRateLimitStore:
    """Rate limits kept in this process: thread-safe, sync and asyncio, exact on its clock.

    Args:
        time_provider: the clock the limits run on (default: the system clock). In tests pass
            a `FakeTimeProvider`: decisions are then exact to the nanosecond on the fake clock.

    Partitions (`key`, per algorithm) whose state has expired — a full bucket, a window that
    ended, a log whose grants all left it — are dropped, so memory stays bounded when keys are
    not. A sliding window keeps one timestamp per permit granted in the last `per` seconds.
    """

    __slots__ = ("_deciders", "_partitions")

    def __init__(self, time_provider: TimeProvider | None = None) -> None:
        self._partitions = _Partitions(time_provider if time_provider is not None else SYSTEM_TIME)
        # The decision of each set of arguments already checked (`typed`): the per-call check
        # then costs one dictionary lookup.
        self._deciders: dict[tuple[object, ...], Callable[[str], float]] = {}

    @property
    def time_provider(self) -> TimeProvider:
        """The clock the limits run on."""
        return self._partitions.time

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
        if (problem := check_take(key, limit, per, burst, algorithm, permits)) is not None:
            raise ValidationError(problem)
        partitions = self._partitions
        if algorithm == "sliding_window":
            return functools.partial(partitions.sliding_window, per=per, limit=limit, permits=permits)
        if algorithm == "fixed_window":
            return functools.partial(partitions.fixed_window, per=per, limit=limit, permits=permits)
        lock = partitions.lock
        clock = monotonic_source(partitions.time)  # without the provider's method frame: a tenth of the decision
        buckets = partitions.buckets  # swept in place, never replaced
        decide = token_bucket
        interval = per / limit
        capacity = limit if burst is None else burst

        def take_token(key: str) -> float:
            with lock:
                now = clock.monotonic()
                tat, wait = decide(buckets.get(key), now, interval, capacity, permits)
                if not wait:
                    buckets[key] = tat
                    if len(buckets) >= partitions.next_sweep:
                        partitions.sweep(now)
            return wait

        return take_token

    take_async = inline_twin(take)  # never blocks: a few dictionary operations under a lock

    def __len__(self) -> int:
        """How many partitions hold state (expired ones until the next sweep)."""
        partitions = self._partitions
        with partitions.lock:
            return len(partitions.buckets) + len(partitions.windows) + len(partitions.logs)

    def __repr__(self) -> str:
        return f"MemoryRateLimitStore(time_provider={self._partitions.time!r})"
