"""The shared-holds suite (DESIGN §2.20): every store that offers `SupportsSharedHolds` passes it.

How a store plugs in: a test module imports `TestSharedHolds`, `rw` and `rw_key` from here and
defines a fixture `shared_store_factory` returning a zero-argument callable that makes a fresh
`SharedHarness`. Each test runs once per flavour ("sync": the blocking API on threads; "async":
the `_async` API on the test's loop), through the lock primitive (`lock(store, prefix="rw")`),
so the lease engine, the store's queue and its notification are all exercised.

Waits are real (threads and tasks meet through events), each bounded by `PATIENCE`: generous,
so a loaded machine slows the tests down but never fails them.
"""

from __future__ import annotations

import asyncio
import functools
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pytest

from resilience import get_lock_token
from resilience.exceptions import LockLeaseLostError, LockNotAcquiredError
from resilience.primitives import LockHandle, LockInfo, Locks, lock

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable

__all__ = ["PATIENCE", "SharedHarness", "TestSharedHolds", "rw", "rw_key"]

PATIENCE = 30.0
"""The longest any step may take (s): only a broken store gets near it."""
PREFIX = "rw"


@dataclass
class SharedHarness:
    """A store under test, how to move its clock, and how many requests wait in a key's queue."""

    store: Any
    advance: Callable[[float], object]
    queued: Callable[[str], int]
    real_time: bool = False
    closers: list[Callable[[], object]] = field(default_factory=list)


class RW:
    """One flavour of the lock primitive over the store, behind one async interface."""

    def __init__(self, harness: SharedHarness, flavour: str, pool: ThreadPoolExecutor) -> None:
        self.harness = harness
        self.locks: Locks = lock(harness.store, prefix=PREFIX, ttl=30)
        self.is_async = flavour == "async"
        self._pool = pool

    def _thread(self, fn: Callable[[], Any]) -> asyncio.Future[Any]:
        return asyncio.get_running_loop().run_in_executor(self._pool, fn)

    async def advance(self, seconds: float) -> None:
        if self.harness.real_time:
            await asyncio.sleep(seconds)
        else:
            self.harness.advance(seconds)

    async def queued(self, key: str, count: int) -> None:
        """Wait until `count` requests wait in `key`'s queue."""
        store_key = f"{PREFIX}:{key}"
        await until(lambda: self.harness.queued(store_key) >= count, f"{count} queued on {key}")

    async def acquire(self, key: str, *, shared: bool, ttl: float = 30, wait: float | None = None) -> LockHandle | None:
        if self.is_async:
            return await self.locks.acquire_async(key, ttl=ttl, shared=shared, wait=wait)
        return await self._thread(lambda: self.locks.acquire(key, ttl=ttl, shared=shared, wait=wait))  # type: ignore[no-any-return]

    async def info(self, key: str) -> LockInfo | None:
        if self.is_async:
            return await self.locks.info_async(key)
        return await self._thread(lambda: self.locks.info(key))  # type: ignore[no-any-return]

    async def release(self, handle: LockHandle) -> bool:
        if self.is_async:
            return await handle.release_async()
        return await self._thread(handle.release)  # type: ignore[no-any-return]

    async def extend(self, handle: LockHandle, ttl: float | None = None) -> bool:
        if self.is_async:
            return await handle.extend_async(ttl)
        return await self._thread(lambda: handle.extend(ttl))  # type: ignore[no-any-return]

    def start(
        self, key: str, name: str, log: list[tuple[str, str, int]], gate: threading.Event, *, shared: bool
    ) -> asyncio.Future[Any]:
        """Hold `key` (waiting up to `PATIENCE`) until `gate` is set; log ("in"/"out", name, token)."""

        def enter(handle: LockHandle) -> None:
            assert get_lock_token() == handle.token
            log.append(("in", name, handle.token))

        if self.is_async:

            async def body(handle: LockHandle) -> None:
                enter(handle)
                while not gate.is_set():
                    await asyncio.sleep(0.002)
                log.append(("out", name, handle.token))

            return asyncio.ensure_future(self.locks.run_async(key, body, shared=shared, wait=PATIENCE))

        def sync_body(handle: LockHandle) -> None:
            enter(handle)
            assert gate.wait(PATIENCE)
            log.append(("out", name, handle.token))

        return self._thread(lambda: self.locks.run(key, sync_body, shared=shared, wait=PATIENCE))


async def until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + PATIENCE
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.002)


def inside(log: list[tuple[str, str, int]]) -> set[str]:
    """Who holds the key now, by the log."""
    holders: set[str] = set()
    for event, name, _ in log:
        (holders.add if event == "in" else holders.discard)(name)
    return holders


def token_of(log: list[tuple[str, str, int]], name: str) -> int:
    return next(token for event, who, token in log if event == "in" and who == name)


@pytest.fixture(params=["sync", "async"])
async def rw(request: pytest.FixtureRequest, shared_store_factory: Callable[[], SharedHarness]) -> AsyncIterator[RW]:
    """The primitive over the store under test, in one flavour."""
    harness = shared_store_factory()
    with ThreadPoolExecutor(64) as pool:
        yield RW(harness, request.param, pool)
    for close in harness.closers:
        close()


@pytest.fixture
def rw_key() -> str:
    """A key no other test uses."""
    return f"shared:{uuid.uuid4().hex}"


class TestSharedHolds:
    """What every store with shared holds guarantees, seen through the lock primitive."""

    async def test_readers_hold_together_and_exclude_a_writer(self, rw: RW, rw_key: str) -> None:
        """Two shared holds at once; a fail-fast exclusive request is refused until both end."""
        first = await rw.acquire(rw_key, shared=True)
        second = await rw.acquire(rw_key, shared=True)
        assert first is not None
        assert second is not None
        assert first.token != second.token
        assert await rw.acquire(rw_key, shared=False) is None
        assert await rw.release(first) is True
        assert await rw.acquire(rw_key, shared=False) is None  # one reader is still in
        assert await rw.release(second) is True
        writer = await rw.acquire(rw_key, shared=False)
        assert writer is not None
        assert await rw.acquire(rw_key, shared=True) is None  # a writer excludes readers
        assert await rw.release(writer) is True

    async def test_info_shows_the_mode_and_every_holder(self, rw: RW, rw_key: str) -> None:
        """`info(key)`: "shared" with each shared holder (by token), "exclusive" with the one writer."""
        first = await rw.acquire(rw_key, shared=True)
        second = await rw.acquire(rw_key, shared=True)
        assert first is not None
        assert second is not None
        info = await rw.info(rw_key)
        assert info is not None
        assert info.mode == "shared"
        assert [holder.token for holder in info.holders] == [first.token, second.token]
        assert await rw.release(first) is True
        assert await rw.release(second) is True
        writer = await rw.acquire(rw_key, shared=False)
        assert writer is not None
        info = await rw.info(rw_key)
        assert info is not None
        assert (info.mode, [holder.token for holder in info.holders]) == ("exclusive", [writer.token])
        assert await rw.release(writer) is True
        assert await rw.info(rw_key) is None

    async def test_tokens_come_from_one_sequence_and_a_writer_outranks_every_earlier_hold(
        self, rw: RW, rw_key: str
    ) -> None:
        """Every hold gets a fresh, increasing token; an exclusive one exceeds all granted before it."""
        tokens: list[int] = []
        for shared in (True, True, False, True, False):
            handles = [await rw.acquire(rw_key, shared=shared) for _ in range(2 if shared else 1)]
            for handle in handles:
                assert handle is not None
                tokens.append(handle.token)
            for handle in handles:
                assert handle is not None
                assert await rw.release(handle) is True
        assert tokens == sorted(tokens)
        assert len(set(tokens)) == len(tokens)

    async def test_a_queued_writer_is_not_starved_by_a_stream_of_readers(self, rw: RW, rw_key: str) -> None:
        """Readers keep overlapping; a writer that queues gets the key, and readers after it wait for it."""
        log: list[tuple[str, str, int]] = []
        gates = [threading.Event() for _ in range(3)]
        readers = [rw.start(rw_key, f"r{n}", log, gates[n], shared=True) for n in range(2)]
        await until(lambda: {"r0", "r1"} <= inside(log), "two readers in")
        writer_gate = threading.Event()
        writer = rw.start(rw_key, "w", log, writer_gate, shared=False)
        await rw.queued(rw_key, 1)
        assert await rw.acquire(rw_key, shared=True) is None  # a fail-fast reader does not jump the writer
        late = rw.start(rw_key, "r2", log, gates[2], shared=True)  # queues behind the writer
        await rw.queued(rw_key, 2)
        gates[0].set()  # the readers come and go; the last one out lets the writer in
        await until(lambda: "r0" not in inside(log), "r0 out")
        assert "r2" not in inside(log)
        gates[1].set()
        await until(lambda: inside(log) == {"w"}, "the writer in, alone")
        writer_gate.set()
        await until(lambda: inside(log) == {"r2"}, "the late reader in")
        gates[2].set()
        await asyncio.wait_for(asyncio.gather(*readers, writer, late), PATIENCE)
        assert token_of(log, "w") > max(token_of(log, "r0"), token_of(log, "r1"))
        assert token_of(log, "r2") > token_of(log, "w")

    async def test_a_continuous_stream_of_readers_never_keeps_a_writer_out(self, rw: RW, rw_key: str) -> None:
        """New readers arrive all the time, each overlapping the last; no reader that came after the writer goes first."""
        log: list[tuple[str, str, int]] = []
        gate = threading.Event()
        stop = threading.Event()
        started: list[asyncio.Future[Any]] = []
        gates: list[threading.Event] = []

        async def stream() -> None:
            while not stop.is_set() and len(gates) < 100:  # a second of readers; more only loads a store's pool
                reader_gate = threading.Event()
                started.append(rw.start(rw_key, f"r{len(gates)}", log, reader_gate, shared=True))
                await asyncio.sleep(0.01)
                if gates:
                    gates[-1].set()  # the previous reader leaves only after this one asked
                gates.append(reader_gate)
            for each in gates:
                each.set()

        streaming = asyncio.ensure_future(stream())
        await until(lambda: len(inside(log)) >= 1, "the stream to start")
        writer = rw.start(rw_key, "w", log, gate, shared=False)
        await rw.queued(rw_key, 1)
        cutoff = len(started)  # readers from here on asked after the writer queued
        await until(lambda: "w" in inside(log), "the writer in")
        assert inside(log) == {"w"}
        before = log[: log.index(("in", "w", token_of(log, "w")))]
        assert all(int(name[1:]) <= cutoff for event, name, _ in before if event == "in")
        stop.set()
        gate.set()
        await asyncio.wait_for(streaming, PATIENCE)
        await asyncio.wait_for(asyncio.gather(writer, *started), PATIENCE)

    async def test_a_writer_never_overtakes_readers_queued_before_it(self, rw: RW, rw_key: str) -> None:
        """Readers queued behind a writer are granted together before a writer that queued after them."""
        log: list[tuple[str, str, int]] = []
        gates = {name: threading.Event() for name in ("w1", "r1", "r2", "w2")}
        first = rw.start(rw_key, "w1", log, gates["w1"], shared=False)
        await until(lambda: "w1" in inside(log), "w1 in")
        r1 = rw.start(rw_key, "r1", log, gates["r1"], shared=True)
        await rw.queued(rw_key, 1)
        r2 = rw.start(rw_key, "r2", log, gates["r2"], shared=True)
        await rw.queued(rw_key, 2)
        w2 = rw.start(rw_key, "w2", log, gates["w2"], shared=False)
        await rw.queued(rw_key, 3)
        gates["w1"].set()
        await until(lambda: inside(log) == {"r1", "r2"}, "both readers in together")
        gates["r1"].set()
        await until(lambda: inside(log) == {"r2"}, "r1 out")
        assert "w2" not in inside(log)
        gates["r2"].set()
        await until(lambda: inside(log) == {"w2"}, "w2 in")
        gates["w2"].set()
        await asyncio.wait_for(asyncio.gather(first, r1, r2, w2), PATIENCE)
        assert token_of(log, "w2") > max(token_of(log, "r1"), token_of(log, "r2")) > token_of(log, "w1")

    async def test_one_readers_loss_or_release_never_touches_another(self, rw: RW, rw_key: str) -> None:
        """A reader that lets its lease lapse loses it alone; the other's renewals and release still work."""
        lapsing = await rw.acquire(rw_key, shared=True, ttl=0.3)
        staying = await rw.acquire(rw_key, shared=True, ttl=30)
        assert lapsing is not None
        assert staying is not None
        await rw.advance(0.5)
        assert await rw.extend(lapsing) is False  # it expired: lost, its signal aborted
        assert isinstance(lapsing.signal.reason, LockLeaseLostError)
        assert not staying.signal.aborted
        assert await rw.extend(staying) is True
        assert await rw.release(lapsing) is False  # nothing to release: the other's hold stays
        third = await rw.acquire(rw_key, shared=True)
        assert third is not None
        assert await rw.release(third) is True
        assert await rw.extend(staying) is True
        assert await rw.acquire(rw_key, shared=False) is None
        assert await rw.release(staying) is True
        writer = await rw.acquire(rw_key, shared=False)
        assert writer is not None
        assert await rw.release(writer) is True

    async def test_not_reentrant_in_any_mode(self, rw: RW, rw_key: str) -> None:
        """A chain holding the key (either mode) is refused at once in either mode, without waiting."""
        for outer in (True, False):
            for inner in (True, False):
                if rw.is_async:

                    async def body(_: LockHandle, shared: bool = inner) -> None:
                        with pytest.raises(LockNotAcquiredError, match="not reentrant"):
                            await rw.locks.run_async(rw_key, _nothing_async, shared=shared, wait=PATIENCE)

                    await rw.locks.run_async(rw_key, body, shared=outer)
                else:

                    def sync_body(_: LockHandle, shared: bool = inner) -> None:
                        with pytest.raises(LockNotAcquiredError, match="not reentrant"):
                            rw.locks.run(rw_key, lambda _: None, shared=shared, wait=PATIENCE)

                    await rw._thread(functools.partial(rw.locks.run, rw_key, sync_body, shared=outer))


async def _nothing_async(_: LockHandle) -> None:
    return None
