"""Circuit state shared by a fleet, in Redis: one hash per circuit, one script per exchange.

The circuit breaker never calls this on a call's path: a background sync sends each circuit's
counted outcomes (and at most one command) every `sync_interval`, and the answer carries the
fleet's state back. Everything the fleet decides (opening on the ratio of the fleet's outcomes,
granting the one probe, closing) happens inside the script, atomically, on the server's clock.

Key `<prefix>:<circuit key>`, a hash:

- `st` state (0 closed, 1 open, 2 half-open, 3 isolated), `ep` epoch (bumped by every
  transition), `un` server milliseconds until the break (open) or the probe's lease
  (half-open) ends, `mn` 1 when the last transition was made by hand, `wq` 1 when another
  process asked for the probe while it was granted (the holder may then no longer renew it);
- a ring of ten buckets over `sampling_duration`: `s<i>`/`f<i>` successes and handled
  failures, `i<i>` which bucket of server time the slot holds.

One key per circuit, so Redis Cluster needs no hash tags. Numbers stay numbers in Lua (every
field name is a literal), the key always has an expiry, and a caller that knows a higher epoch
than the key (the key expired, or Redis lost its data) writes back what it knows: a restart
cannot close an open circuit.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import weakref
from typing import TYPE_CHECKING, Any, NamedTuple

from resilience._validation import wrong_store
from resilience.stores._redis import RedisClientsStore, _AsyncClient, _check_str
from resilience.stores._redis_scripts import LuaScript

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = ["CIRCUIT_EXCHANGE", "CircuitExchange", "CircuitReply", "RedisCircuitStateStore"]

_RING = ", ".join(f"'{kind}{slot}'" for kind in "sfi" for slot in range(10))

CIRCUIT_EXCHANGE = LuaScript(
    "circuit_exchange",
    f"""
-- KEYS[1] the circuit's hash.
-- ARGV[1] successes, ARGV[2] handled failures (counted under epoch ARGV[9]);
-- ARGV[3] failure ratio; ARGV[4] minimum throughput; ARGV[5] sampling (ms); ARGV[6] break (ms);
-- ARGV[7] command (0 none, 1 claim the probe, 2 probe succeeded, 3 probe failed, 4 isolate,
-- 5 close by hand, 6 opened alone, 7 renew an unused probe); ARGV[8] the epoch the command
-- applies to;
-- ARGV[9] the caller's epoch; ARGV[10] the caller's state; ARGV[11] ms of break the caller
-- knows is left (or, for command 6, its break); ARGV[12] expiry (ms); ARGV[13] the caller's
-- sync interval (ms).
-- Returns {{state, epoch, ms left, manual, granted, ms until a granted probe may start}}.
local RING = {{{_RING}}}
local now = redis.call('TIME')
local now_ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
local head = redis.call('HMGET', KEYS[1], 'st', 'ep', 'un', 'mn', 'wq')
local st, ep = tonumber(head[1]), tonumber(head[2])
local un, mn, wq = tonumber(head[3]) or 0, tonumber(head[4]) or 0, tonumber(head[5]) or 0
local known = tonumber(ARGV[9])
local dirty, reset, granted, restored, wait = false, false, 0, false, 0
local brk, interval = tonumber(ARGV[6]), tonumber(ARGV[13])
-- An unused probe is held this long past its grant or last renewal.
local lease = math.max(brk, 3 * interval)
if not ep or known > ep then
  -- Lost (expiry, a restart without persistence, a flush) or never written: a caller that
  -- knows a later epoch writes back what it knows, so an open circuit stays open and a
  -- probe under way keeps its epoch (its outcome still lands).
  if ep then
    redis.call('HDEL', KEYS[1], unpack(RING))  -- counts of an older epoch
  end
  ep, st, mn, un, wq = known, tonumber(ARGV[10]), 0, 0, 0
  if st == 1 then
    un = now_ms + tonumber(ARGV[11])
  elseif st == 2 then
    un = now_ms + lease
  end
  dirty, restored = true, true
end
local function move(state, until_ms, manual)
  st, ep, un, mn, wq, dirty = state, ep + 1, until_ms, manual, 0, true
end
local command, about = tonumber(ARGV[7]), tonumber(ARGV[8])
if command == 1 then
  -- Claimed up to two intervals before the break ends, so that the first call after the
  -- break is the probe; the grant says how long to wait before using it.
  if (st == 1 and now_ms + 2 * interval >= un) or (st == 2 and now_ms >= un) then
    wait = math.max(0, un - now_ms)  -- 0 unless the break is still on
    move(2, math.max(un, now_ms) + lease, 0)
    granted = 1
  elseif st == 2 and wq == 0 then
    wq, dirty = 1, true
  end
elseif command == 7 and st == 2 and ep == about and wq == 0 then
  -- The holder of an unused probe keeps it while nobody else asks for it.
  un, dirty, granted = math.max(un, now_ms + lease), true, 1
elseif (command == 2 or command == 3) and st == 2 and ep == about then
  if command == 2 then
    move(0, 0, 0)
    reset = true
  else
    move(1, now_ms + brk, 0)
  end
  granted = 1
-- A state written back just now is the caller's, its own move already in it (an isolation
-- made before its first exchange, say): the move still takes a new epoch, or the members at
-- `known` would never hear of it.
elseif command == 4 or command == 5 then
  local target = command == 4 and 3 or 0  -- isolated, or closed (its counts reset)
  if st ~= target or restored then
    move(target, 0, 1)
    reset = target == 0
  end
  granted = 1
elseif command == 6 and (st == 0 or restored) then
  move(1, now_ms + tonumber(ARGV[11]), 0)
  reset, granted = true, 1
end
local successes, failures = tonumber(ARGV[1]), tonumber(ARGV[2])
local wrote = st == 0 and not reset and known == ep and (successes > 0 or failures > 0)
if wrote then
  local bucket = math.floor(now_ms / (tonumber(ARGV[5]) / 10))
  local ring = redis.call('HMGET', KEYS[1], unpack(RING))
  local slot = bucket % 10 + 1
  if tonumber(ring[20 + slot]) ~= bucket then
    ring[slot], ring[10 + slot] = 0, 0
  end
  local s = (tonumber(ring[slot]) or 0) + successes
  local f = (tonumber(ring[10 + slot]) or 0) + failures
  redis.call('HSET', KEYS[1], RING[slot], s, RING[10 + slot], f, RING[20 + slot], bucket)
  if failures > 0 then
    -- Polly checks the ratio when a failure is recorded: over the buckets still in the window.
    ring[slot], ring[10 + slot], ring[20 + slot] = s, f, bucket
    local total, failed = 0, 0
    for i = 1, 10 do
      local index = tonumber(ring[20 + i])
      if index and index > bucket - 10 then
        total = total + (tonumber(ring[i]) or 0) + (tonumber(ring[10 + i]) or 0)
        failed = failed + (tonumber(ring[10 + i]) or 0)
      end
    end
    if total >= tonumber(ARGV[4]) and failed / total >= tonumber(ARGV[3]) then
      move(1, now_ms + brk, 0)
      reset = true
    end
  end
end
if reset then
  redis.call('HDEL', KEYS[1], unpack(RING))
end
if dirty then
  redis.call('HSET', KEYS[1], 'st', st, 'ep', ep, 'un', un, 'mn', mn, 'wq', wq)
end
if dirty or wrote then
  redis.call('PEXPIRE', KEYS[1], ARGV[12])
end
return {{st, ep, math.max(0, un - now_ms), mn, granted, wait}}
""",
)


class CircuitExchange(NamedTuple):
    """What one circuit sends in a sync (all numbers)."""

    successes: int
    failures: int
    failure_ratio: float
    minimum_throughput: int
    sampling_duration: float
    break_duration: float
    command: int
    command_epoch: int
    epoch: int
    state: int
    remaining: float
    """Seconds of break the caller knows are left (for command 6: the break it opened for)."""
    interval: float = 0.1
    """The caller's `sync_interval`: how early a probe may be claimed, how long an unused one is held."""


class CircuitReply(NamedTuple):
    """The fleet's state after an exchange."""

    state: int
    epoch: int
    remaining: float
    """Seconds until the break (open) or the probe's lease (half-open) ends."""
    manual: bool
    granted: bool
    """The command took effect (for a probe claim: the probe is the caller's)."""
    wait: float = 0.0
    """Seconds until a probe granted before the break's end may start."""


def _ms(seconds: float) -> int:
    return max(0, math.ceil(seconds * 1000 - 1e-9)) if math.isfinite(seconds) else 0


def _arguments(exchange: CircuitExchange) -> list[object]:
    sampling = max(10, _ms(exchange.sampling_duration))  # a bucket is at least a millisecond
    brk = max(1, _ms(exchange.break_duration))
    return [
        int(exchange.successes),
        int(exchange.failures),
        repr(float(exchange.failure_ratio)),
        int(exchange.minimum_throughput),
        sampling,
        brk,
        int(exchange.command),
        int(exchange.command_epoch),
        int(exchange.epoch),
        int(exchange.state),
        _ms(exchange.remaining),
        max(60_000, 2 * (sampling + brk)),  # the key's expiry (ms)
        max(1, _ms(exchange.interval)),
    ]


def _reply(raw: Sequence[Any]) -> CircuitReply:
    state, epoch, left, manual, granted, wait = (int(value) for value in raw)
    return CircuitReply(state, epoch, left / 1000, bool(manual), bool(granted), wait / 1000)


class RedisCircuitStateStore(RedisClientsStore):
    """Circuit state shared across processes through Redis (`circuit_breaker_strategy(state_store=...)`).

    Args:
        client: a sync client (`redis.Redis`, `redis.cluster.RedisCluster`, valkey alike) or a
            zero-argument factory of one; the background sync runs on one shared thread.
        async_client: an asyncio client, an awaitable of one, or a factory of one; without a sync
            client the sync runs as a task on the event loop of the async executions. A factory
            is called once per event loop (an asyncio client serves one loop): the store closes
            the client it made when that loop's sync task ends (`asyncio.run()` per job works).
        prefix: the key namespace: keys are `<prefix>:<circuit key>`.

    Every circuit built with this store and the same `circuit_key` is one circuit for the
    whole fleet. Calls never wait for Redis: outcomes are counted locally and sent in batches;
    the answer brings the fleet's state back. The store closes nothing but what it opened
    itself; the clients stay yours.
    """

    _kind = "RedisCircuitStateStore"

    def __init__(self, client: Any = None, *, async_client: Any = None, prefix: str = "circuit") -> None:
        super().__init__(self._kind, client, async_client, prefix)
        self._closed = False
        self._tasks: weakref.WeakSet[asyncio.Task[None]] = weakref.WeakSet()  # asyncio syncs, to stop
        # With a factory (its runner's `_factory`): this store's own client of each event loop,
        # closed with its sync task.
        self._loop_clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _AsyncClient] = (
            weakref.WeakKeyDictionary()
        )

    @property
    def closed(self) -> bool:
        """True after `close()`/`aclose()`: its circuits no longer synchronise."""
        return self._closed

    def close(self) -> None:
        """Stop synchronising the circuits of this store: they go on local state. Clients stay open."""
        self._closed = True
        super().close()

    async def aclose(self) -> None:
        """`close()`, and wait until the sync tasks on this event loop have stopped."""
        self._closed = True
        with contextlib.suppress(RuntimeError):
            loop = asyncio.get_running_loop()
            tasks = [task for task in self._tasks if task.get_loop() is loop and not task.done()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        await super().aclose()

    def key(self, circuit_key: str) -> str:
        """The Redis key of circuit `circuit_key`."""
        return f"{self._prefix}:{_check_str('circuit_key', circuit_key)}"

    def exchange(self, circuit_key: str, exchange: CircuitExchange) -> CircuitReply:
        """Send one circuit's batch and command; the fleet's state (one round trip)."""
        return _reply(self._run("exchange", CIRCUIT_EXCHANGE, ([self.key(circuit_key)], _arguments(exchange))))

    async def exchange_async(self, circuit_key: str, exchange: CircuitExchange) -> CircuitReply:
        """See `exchange`."""
        runner = self._async_runner("exchange_async")
        if runner._factory is not None:
            loop = asyncio.get_running_loop()
            runner = self._loop_clients.get(loop) or self._loop_clients.setdefault(
                loop, _AsyncClient(runner._factory, self._kind)
            )
        return _reply(await runner.run(CIRCUIT_EXCHANGE, [self.key(circuit_key)], _arguments(exchange)))

    async def release_loop_client(self) -> None:
        """Close the client this store made for the running loop once no other circuit's sync uses it."""
        loop, current = asyncio.get_running_loop(), asyncio.current_task()
        if any(task is not current and task.get_loop() is loop and not task.done() for task in self._tasks):
            return  # another circuit of this store still syncs on this loop: the last one closes it
        runner = self._loop_clients.pop(loop, None)
        client = None if runner is None else runner._client  # None: the factory was never called
        if client is not None:
            with contextlib.suppress(Exception):
                await client.aclose()


def check_state_store(value: object) -> str | None:
    """A problem with `state_store=`, or None."""
    if value is None or isinstance(value, RedisCircuitStateStore):
        return None
    return wrong_store(value, "RedisCircuitStateStore", "resilience.stores", "must be a RedisCircuitStateStore")
