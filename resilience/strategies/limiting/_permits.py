"""In-process permits for the local concurrency limiter: `limit` holders per key, a FIFO queue.

State per key — holders and the queue of waiters — lives under one lock and only while the key
is in use, so memory follows the keys in use, not every key ever seen. A released permit goes
straight to the first waiter (no barging: a newcomer never overtakes the queue). Sync and
asyncio waiters share the queue; each is woken through its own `wake` (an event set, or a
future resolved on its loop), and decides under the lock what happened to it: granted, timed
out, or aborted.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import threading
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from resilience._runtime._threads import resolve_threadsafe
from resilience._time import clock_wait, clock_wait_async

if TYPE_CHECKING:
    from collections.abc import Callable, Generator

    from resilience._signal import Signal
    from resilience._time import TimeProvider

__all__ = ["LocalPermits"]


@dataclass(slots=True, eq=False)
class _Waiter:
    wake: Callable[[], object]
    granted: bool = False


@dataclass(slots=True, eq=False)
class _Partition:
    held: int = 0
    waiters: deque[_Waiter] = field(default_factory=deque)


class LocalPermits:
    """`limit` permits per key, up to `queue` waiters per key served first come, first served."""

    __slots__ = ("__weakref__", "_idle", "_limit", "_lock", "_partitions", "_pools", "_queue", "_time")

    def __init__(self, limit: int, queue: int, time_provider: TimeProvider) -> None:
        self._limit = limit
        self._queue = queue
        self._time = time_provider
        self._lock = threading.Lock()
        self._partitions: dict[str, _Partition] = {}
        # The last partition forgotten (nothing held, nobody waiting), reused by the next key
        # that starts: an uncontended execution allocates nothing.
        self._idle: _Partition | None = None
        self._pools: dict[str, deque[None]] = {}

    def pool(self, key: str) -> deque[None] | None:
        """The permits of a constant `key` as a pool of free tokens, when nobody may queue (`queue=0`).

        Taking a permit is `pool.pop()` (`IndexError`: none is free) and giving it back
        `pool.append(None)`: one C call each, atomic under the GIL, no lock. A strategy whose key
        is a constant asks for its pool once; it stays for the permits' life (one per constant
        key). Permits of `key` held through `try_acquire` meanwhile are taken out of the new pool,
        and from then on `try_acquire` and `release` of `key` use the pool too. None with a queue:
        a released permit must then go to the first waiter.
        """
        if self._queue:
            return None
        with self._lock:
            pool = self._pools.get(key)
            if pool is None:
                partition = self._partitions.pop(key, None)
                held = 0 if partition is None else partition.held
                pool = self._pools[key] = deque([None] * max(self._limit - held, 0))
        return pool

    def try_acquire(self, key: str) -> bool:
        """Take a permit of `key` at once if one is free and nobody queues for it."""
        with self._lock:
            if self._pools:
                pool = self._pools.get(key)
                if pool is not None:
                    try:
                        pool.pop()  # its own strategy takes from it without the lock
                    except IndexError:
                        return False
                    return True
            partition = self._partitions.get(key)
            if partition is None:
                partition = self._idle or _Partition()
                self._idle = None
                self._partitions[key] = partition
            elif partition.held >= self._limit or partition.waiters:
                return False
            partition.held += 1
            return True

    def release(self, key: str) -> None:
        """Give a permit back: to the first waiter, or to the pool (forgetting an idle key)."""
        with self._lock:
            if self._pools:
                pool = self._pools.get(key)
                if pool is not None:
                    pool.append(None)
                    return
            partition = self._partitions[key]
            waiters = partition.waiters
            if waiters:
                waiter = waiters.popleft()
                waiter.granted = True  # the permit passes on: `held` stays
                waiter.wake()
                return
            partition.held -= 1
            if partition.held == 0:
                del self._partitions[key]
                self._idle = partition

    def _enqueue(self, key: str, wake: Callable[[], object]) -> _Waiter | None:
        """Join the queue of `key` (None when it is full); a permit freed meanwhile is taken at once."""
        with self._lock:
            partition = self._partitions.setdefault(key, _Partition())
            waiter = _Waiter(wake)
            if partition.held < self._limit and not partition.waiters:
                partition.held += 1
                waiter.granted = True
                return waiter
            if len(partition.waiters) >= self._queue:
                return None
            partition.waiters.append(waiter)
            return waiter

    def _leave(self, key: str, waiter: _Waiter) -> bool:
        """Stop waiting: True if the permit was granted meanwhile (then it is ours), else leave the queue."""
        with self._lock:
            if waiter.granted:
                return True
            # While anyone waits, all `limit` permits are held: the partition stays.
            self._partitions[key].waiters.remove(waiter)
            return False

    @contextlib.contextmanager
    def _waiting(self, key: str, waiter: _Waiter, signal: Signal) -> Generator[None, None, None]:
        """Around a queued wait: an abort of `signal` wakes it too.

        An exception that interrupts the wait leaves the queue, or hands on the permit granted
        meanwhile, before it propagates.
        """
        remove = None
        try:
            remove = signal.add_wakeup(lambda _reason: waiter.wake())
            yield
        except BaseException:
            if self._leave(key, waiter):
                self.release(key)
            raise
        finally:
            if remove is not None:
                remove()

    def _after_wait(self, key: str, waiter: _Waiter, signal: Signal) -> bool:
        """After the wait (if any): True holding the permit, False timed out; the signal's reason if it aborted.

        A permit granted in the same instant as the abort is handed on.
        """
        if not self._leave(key, waiter):
            signal.raise_if_aborted()
            return False
        if signal.aborted:
            self.release(key)
            signal.raise_if_aborted()
        return True

    def acquire(self, key: str, timeout: float, signal: Signal) -> bool | None:
        """Wait up to `timeout` for a permit: True granted, False timed out, None queue full.

        Raises the signal's reason if it aborts while waiting (the permit, if granted in the
        same instant, is handed on). A wait interrupted by any exception (KeyboardInterrupt, an
        exception raised by a signal handler) leaves the queue, or hands on the permit granted
        meanwhile, before the exception propagates.
        """
        woken = threading.Event()
        waiter = self._enqueue(key, woken.set)
        if waiter is None:
            return None
        if not waiter.granted:
            with self._waiting(key, waiter, signal):
                clock_wait(self._time, woken, timeout)
        return self._after_wait(key, waiter, signal)

    async def acquire_async(self, key: str, timeout: float, signal: Signal) -> bool | None:
        """The asyncio twin of `acquire` (a cancelled waiter leaves the queue, or hands its permit on)."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()
        waiter = self._enqueue(key, functools.partial(resolve_threadsafe, loop, future))
        if waiter is None:
            return None
        if not waiter.granted:
            with self._waiting(key, waiter, signal):
                await clock_wait_async(self._time, future, timeout)
        return self._after_wait(key, waiter, signal)

    def in_use(self) -> int:
        """Permits held now, over every key (`resilience.limiter.in_use`)."""
        with self._lock:
            pooled = sum(self._limit - len(pool) for pool in self._pools.values())
            return pooled + sum(partition.held for partition in self._partitions.values())

    def queued(self) -> int:
        """Callers waiting now, over every key (`resilience.limiter.queued`)."""
        with self._lock:
            return sum(len(partition.waiters) for partition in self._partitions.values())

    def __len__(self) -> int:
        """How many keys are in use (held or waited for)."""
        with self._lock:
            return len(self._partitions) + sum(len(pool) < self._limit for pool in self._pools.values())
