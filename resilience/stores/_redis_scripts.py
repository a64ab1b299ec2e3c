"""The Lua scripts of the Redis stores: each exists once, here, and runs by EVALSHA.

Rules every script keeps (docs/redis.md explains why):

- It touches only the keys it is given, all in one hash slot, so Redis Cluster works.
- Only the server's clock is read (`TIME`); the client's clock never enters a decision.
- Token arithmetic stays numeric: tokens are passed to `redis.call` as Lua numbers (Redis
  converts them without loss below 2**53) and returned as integer replies. A token is never
  formatted with `tostring`, `..` or `cjson`, which keep only 14 significant digits.
- No key is ever left without an expiry: a script that writes first checks every ttl it will
  pass to `PEXPIRE` (`_TTL_CHECK`), because a script that fails half-way keeps its writes.

Lock key `<prefix>:<key>`: a hash with `owner` (absent when free) and `token` (the last token
issued, kept after release as a tombstone so that the next token is at least one more). While
held, the key expires with the lease, so `PTTL` is the remaining lease time.

Fair waiting (docs/redis.md, modelled on Redisson's fair lock): waiters on a lock
form a FIFO queue in two companion keys in the lock's hash slot (`_redis.companions` names
them): `<q>` (a sorted set: member = waiting owner, score = arrival number) and `<q>:t` (the
same members scored by the server-ms time their entry expires; a waiter refreshes its entry at
each attempt, so a crashed waiter drops out). A free lock goes only to the queue's live head
(or to anyone when nobody waits); a release announces the head's turn on the lock's channel
(`h:<owner>`), and only when somebody waits or watches (`<q>:w`, set by a waiter outside the
queue, see `LOCK_HELD`), so an uncontended release publishes nothing.

Semaphore keys `{<prefix>:<key>}` (a sorted set: member = owner, score = expiry in server
milliseconds; pruned by every script) and `{<prefix>:<key>}:tokens` (a hash: `seq` = last token issued, `o:<owner>` =
that holder's token); the braces put both in one hash slot. Its waiters queue as a lock's, in
`{<prefix>:<key>}:q` and `:q:t` (same slot): a free slot goes only to one of the first
(limit - holders) live entries; a release still publishes `released` to every waiter.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

__all__ = [
    "LOCK_ACQUIRE",
    "LOCK_HELD",
    "LOCK_INFO",
    "LOCK_RELEASE",
    "LOCK_RENEW",
    "QUEUE_BOUND",
    "QUEUE_ENTRY_MS",
    "SEMAPHORE_ACQUIRE",
    "SEMAPHORE_HELD",
    "SEMAPHORE_INFO",
    "SEMAPHORE_RELEASE",
    "SEMAPHORE_RENEW",
    "SEMAPHORE_TURN",
    "TOMBSTONE_MS",
    "LuaScript",
]

QUEUE_ENTRY_MS = 3_000
"""How long a waiter's queue entry lives (ms) unless it tries again; a waiter tries at least
once a second (the backoff cap), so only a crashed or stuck waiter drops out, and a crashed
head delays the lock by at most this much plus the next waiter's backoff step (1 s at most)."""
QUEUE_BOUND = 1_000
"""At most this many waiters queue per lock; more keep polling outside the queue."""

TOMBSTONE_MS = 60_000
"""How long a released key keeps its last token (ms). Beyond it, server-TIME seeding takes over."""


@dataclass(frozen=True, slots=True)
class LuaScript:
    """A script's source and the SHA1 that EVALSHA names it by."""

    name: str
    source: str
    sha: str = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "sha", hashlib.sha1(self.source.encode(), usedforsecurity=False).hexdigest())


# A fresh token: the server time in microseconds, or one more than the previous token when
# that is not smaller (two grants within one microsecond, or a clock that stepped back while
# the previous token was still remembered). ~1.7e15 today: far below 2**53 (~9.0e15).
_MINT = """
local function mint(previous)
  local now = redis.call('TIME')
  local token = tonumber(now[1]) * 1000000 + tonumber(now[2])
  previous = tonumber(previous)
  if previous and previous >= token then
    token = previous + 1
  end
  return token
end
"""

# The fair queue of a lock or a semaphore: `qa` (arrivals), `qe` (entry expiries) and, for a
# lock, `qw` (its watch key), bound by `_LOCK_QUEUE_KEYS` / `_SEMAPHORE_QUEUE_KEYS` (absent
# when a lock key cannot share a slot with companions on Cluster: then nobody queues).
# `queue_head` drops the expired entries and returns the live head's owner (or false);
# `join` adds the owner at the back (or refreshes its entry), unless `bound` entries already
# wait; `among_first` tells whether the owner may take one of `free` slots.
_LOCK_QUEUE_KEYS = """
local qa, qe, qw = KEYS[2], KEYS[3], KEYS[4]
"""
_SEMAPHORE_QUEUE_KEYS = """
local qa, qe, qw = KEYS[3], KEYS[4], nil
"""
_QUEUE_LIB = """
local clock_ms = false
local function server_ms()
  if not clock_ms then
    local now = redis.call('TIME')
    clock_ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
  end
  return clock_ms
end
local function queue_head()
  if not qa or redis.call('EXISTS', qa) == 0 then
    return false
  end
  while true do
    local first = redis.call('ZRANGE', qa, 0, 0)[1]
    if not first then
      return false
    end
    local expires = redis.call('ZSCORE', qe, first)
    if expires and tonumber(expires) > server_ms() then
      return first
    end
    redis.call('ZREM', qa, first)  -- expired (or without an expiry): a waiter that is gone
    redis.call('ZREM', qe, first)
  end
end
-- Drop the expired entries (waiters that are gone).
local function prune()
  local gone = redis.call('ZRANGEBYSCORE', qe, '-inf', server_ms())
  for i = 1, #gone do
    redis.call('ZREM', qa, gone[i])
  end
  if #gone > 0 then
    redis.call('ZREMRANGEBYSCORE', qe, '-inf', server_ms())
  end
end
local function join(owner, entry_ms, bound)
  if not redis.call('ZSCORE', qa, owner) then
    prune()  -- first, so that waiters that are gone never fill the bound
    if redis.call('ZCARD', qa) >= tonumber(bound) then
      return  -- full: this waiter keeps polling outside the queue
    end
    local last = redis.call('ZRANGE', qa, -1, -1, 'WITHSCORES')
    local arrival = 1
    if last[2] then
      arrival = tonumber(last[2]) + 1
    end
    redis.call('ZADD', qa, arrival, owner)
  end
  redis.call('ZADD', qe, server_ms() + tonumber(entry_ms), owner)
  -- Every entry lives the same QUEUE_ENTRY_MS, so the newest refresh outlives them all.
  redis.call('PEXPIRE', qa, entry_ms)
  redis.call('PEXPIRE', qe, entry_ms)
end
local function leave(owner)
  redis.call('ZREM', qa, owner)
  redis.call('ZREM', qe, owner)
end
-- Whether `owner` may take one of `free` (> 0) free slots: when it is among the first `free`
-- live waiters, or, outside the queue, when fewer than `free` wait. Second result: whether
-- it is queued (it leaves the queue when it takes the slot).
local function among_first(owner, free)
  if redis.call('EXISTS', qa) == 0 then
    return true, false  -- nobody waits: the common, uncontended case
  end
  prune()
  local arrival = redis.call('ZSCORE', qa, owner)
  if arrival then
    -- Its rank: how many arrived before it (ZCOUNT, which the ACL already allows, not ZRANK).
    return redis.call('ZCOUNT', qa, '-inf', '(' .. arrival) < free, true
  end
  return redis.call('ZCARD', qa) < free, false
end
-- Tell the waiters that the lock is free: the head by name (only it acts on it), or, with
-- nobody queued, whoever watches `qw`. Silent when nobody waits (no wasted PUBLISH).
local function announce(command)
  if command == '' then
    return
  end
  if not qa then
    redis.call(command, KEYS[1], 'released')
    return
  end
  if redis.call('EXISTS', qa, qw) == 0 then
    return  -- nobody queues or watches: the common, uncontended release
  end
  local head = queue_head()
  if head then
    redis.call(command, KEYS[1], 'h:' .. head)
  elseif redis.call('EXISTS', qw) == 1 then
    redis.call(command, KEYS[1], 'released')
  end
end
"""
_QUEUE = _LOCK_QUEUE_KEYS + _QUEUE_LIB
_SEMAPHORE_QUEUE = _SEMAPHORE_QUEUE_KEYS + _QUEUE_LIB

# A ttl (ms) that PEXPIRE accepts whatever the server time: checked before any write.
_TTL_CHECK = """
local function check_ttl(ttl)
  ttl = tonumber(ttl)
  if not ttl or ttl < 1 or ttl > 1000000000000000 then
    return redis.error_reply('ERR invalid ttl (ms): must be between 1 and 1e15')
  end
  return false
end
"""

LOCK_ACQUIRE = LuaScript(
    "lock_acquire",
    _MINT
    + _TTL_CHECK
    + _QUEUE
    + """
-- KEYS[1] lock key; KEYS[2], KEYS[3] its queue (absent: no fair queue);
-- ARGV[1] owner; ARGV[2] ttl (ms); ARGV[3] queue entry ttl (ms), 0 to not join the queue;
-- ARGV[4] queue bound.
-- Returns the token (>= 1) when acquired or already held by ARGV[1] (its expiry refreshed);
-- -remaining ms when held by another owner (-1 in the lease's last millisecond, where PTTL
-- says 0: the waiter tries again right after the expiry); when free but promised to the head
-- of the queue, -ms until the head's entry expires (a crashed head's turn ends then); 0 only
-- for a held key without an expiry. A refused caller with ARGV[3] > 0 joins the queue (or
-- refreshes its entry); a free lock goes to the live head, or to anyone if none waits.
local bad = check_ttl(ARGV[2])
if bad then
  return bad
end
local lease = redis.call('HMGET', KEYS[1], 'owner', 'token')
if lease[1] == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return tonumber(lease[2])
end
local head = false
if not lease[1] then
  head = queue_head()
  if not head or head == ARGV[1] then
    if head then
      leave(ARGV[1])
    end
    local token = mint(lease[2])
    redis.call('HSET', KEYS[1], 'owner', ARGV[1], 'token', token)
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
    return token
  end
end
if KEYS[2] and tonumber(ARGV[3]) > 0 then
  join(ARGV[1], ARGV[3], ARGV[4])
end
if lease[1] then
  local left = redis.call('PTTL', KEYS[1])
  if left >= 0 then
    return -math.max(left, 1)
  end
elseif head then
  return -math.max(1, tonumber(redis.call('ZSCORE', qe, head)) - server_ms())
end
return 0
""",
)

LOCK_RENEW = LuaScript(
    "lock_renew",
    _TTL_CHECK
    + """
-- KEYS[1] lock key; ARGV[1] owner; ARGV[2] ttl (ms).
-- Returns 1 when ARGV[1] holds the live lease (now expiring ttl from now), else 0.
-- Never acquires: an expired or released lease stays lost.
local bad = check_ttl(ARGV[2])
if bad then
  return bad
end
if redis.call('HGET', KEYS[1], 'owner') == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
""",
)

LOCK_RELEASE = LuaScript(
    "lock_release",
    _QUEUE
    + """
-- KEYS[1] lock key; KEYS[2], KEYS[3] its queue, KEYS[4] its watch key (absent: no queue);
-- ARGV[1] owner; ARGV[2] tombstone (ms); ARGV[3] 'PUBLISH', 'SPUBLISH' (Cluster) or '' (no
-- notification).
-- Returns 1 when ARGV[1] held the lease (now free, its token kept as a tombstone), else 0.
-- A caller that does not hold the lease leaves the queue (a waiter that gave up, or whose
-- acquire was interrupted); when it was the head of a free lock, the turn passes on.
-- It announces before it frees: a server without SPUBLISH fails the script with nothing
-- changed but expired queue entries dropped.
local holder = redis.call('HGET', KEYS[1], 'owner')
if holder ~= ARGV[1] then
  if KEYS[2] and redis.call('ZSCORE', KEYS[2], ARGV[1]) then
    local was_head = queue_head() == ARGV[1]
    leave(ARGV[1])
    if was_head and not holder then
      announce(ARGV[3])
    end
  end
  return 0
end
announce(ARGV[3])
redis.call('HDEL', KEYS[1], 'owner')
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
""",
)

# Every semaphore script starts here: read the server clock, drop the holders whose lease has
# expired (and their tokens), and define `settle`, which sets both keys' expiries after a
# change: the last lease plus a tombstone, so that lapsed holders are still there to be pruned
# and the last token is remembered.
_SEMAPHORE_PRELUDE = """
local now = redis.call('TIME')
local now_ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
local expired = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now_ms)
if #expired > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now_ms)
  for i = 1, #expired do
    redis.call('HDEL', KEYS[2], 'o:' .. expired[i])
  end
end
local function settle(tombstone)
  local horizon = tonumber(tombstone)
  local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
  if #last > 0 then
    horizon = horizon + tonumber(last[2]) - now_ms
    redis.call('PEXPIRE', KEYS[1], horizon)
  end
  redis.call('PEXPIRE', KEYS[2], horizon)
end
"""

SEMAPHORE_ACQUIRE = LuaScript(
    "semaphore_acquire",
    _MINT
    + _TTL_CHECK
    + _SEMAPHORE_QUEUE
    + _SEMAPHORE_PRELUDE
    + """
-- KEYS[1] holders (sorted set); KEYS[2] tokens (hash); KEYS[3], KEYS[4] the queue;
-- ARGV[1] owner; ARGV[2] ttl (ms); ARGV[3] limit; ARGV[4] tombstone (ms);
-- ARGV[5] queue entry ttl (ms), 0 to not join the queue; ARGV[6] queue bound.
-- Returns the holder's token (>= 1): a new one, or the same one when ARGV[1] already holds a
-- slot (its expiry refreshed); when all `limit` slots are taken, -ms until the first frees;
-- 0 when a slot is free but promised to waiters ahead of ARGV[1]. A refused caller with
-- ARGV[5] > 0 joins the queue (or refreshes its entry); a free slot goes to the first
-- (limit - holders) live waiters, or to anyone while fewer wait.
local bad = check_ttl(ARGV[2])
if bad then
  return bad
end
local expires = now_ms + tonumber(ARGV[2])
local token = false
if redis.call('ZSCORE', KEYS[1], ARGV[1]) then
  token = tonumber(redis.call('HGET', KEYS[2], 'o:' .. ARGV[1]))
else
  local free = tonumber(ARGV[3]) - redis.call('ZCARD', KEYS[1])
  local may, queued = false, false
  if free > 0 then
    may, queued = among_first(ARGV[1], free)
  end
  if not may then
    if tonumber(ARGV[5]) > 0 then
      join(ARGV[1], ARGV[5], ARGV[6])
    end
    if free > 0 then
      return 0
    end
    local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
    return -math.max(1, tonumber(first[2]) - now_ms)
  end
  if queued then
    leave(ARGV[1])
  end
end
if not token then
  token = mint(redis.call('HGET', KEYS[2], 'seq'))
  redis.call('HSET', KEYS[2], 'seq', token, 'o:' .. ARGV[1], token)
end
redis.call('ZADD', KEYS[1], expires, ARGV[1])
settle(ARGV[4])
return token
""",
)

SEMAPHORE_RENEW = LuaScript(
    "semaphore_renew",
    _TTL_CHECK
    + _SEMAPHORE_PRELUDE
    + """
-- KEYS[1] holders; KEYS[2] tokens; ARGV[1] owner; ARGV[2] ttl (ms); ARGV[3] tombstone (ms).
-- Returns 1 when ARGV[1] holds a live slot (now expiring ttl from now), else 0.
local bad = check_ttl(ARGV[2])
if bad then
  return bad
end
if not redis.call('ZSCORE', KEYS[1], ARGV[1]) then
  return 0
end
redis.call('ZADD', KEYS[1], now_ms + tonumber(ARGV[2]), ARGV[1])
settle(ARGV[3])
return 1
""",
)

SEMAPHORE_RELEASE = LuaScript(
    "semaphore_release",
    _SEMAPHORE_QUEUE
    + _SEMAPHORE_PRELUDE
    + """
-- KEYS[1] holders; KEYS[2] tokens; KEYS[3], KEYS[4] the queue; ARGV[1] owner;
-- ARGV[2] tombstone (ms); ARGV[3] 'PUBLISH', 'SPUBLISH' or ''.
-- Returns 1 when ARGV[1] held a live slot (now free), else 0. A caller that holds no slot
-- leaves the queue instead (a waiter that gave up), and the waiters are woken: the next one
-- may now be among those a free slot goes to. Every release wakes every waiter; each tries
-- again, and only those the queue order allows take a slot.
if not redis.call('ZSCORE', KEYS[1], ARGV[1]) then
  if redis.call('ZSCORE', KEYS[3], ARGV[1]) then
    if ARGV[3] ~= '' then
      redis.call(ARGV[3], KEYS[1], 'released')
    end
    leave(ARGV[1])
  end
  return 0
end
if ARGV[3] ~= '' then
  redis.call(ARGV[3], KEYS[1], 'released')
end
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('HDEL', KEYS[2], 'o:' .. ARGV[1])
settle(ARGV[2])
return 1
""",
)

LOCK_HELD = LuaScript(
    "lock_held",
    _QUEUE
    + """
-- KEYS[1] lock key; KEYS[2], KEYS[3] its queue, KEYS[4] its watch key (absent: no queue);
-- ARGV[1] the waiting owner ('' for a caller outside the queue); ARGV[2] how long it waits (ms).
-- Returns 0 when ARGV[1] may take the lock now (free, with nobody ahead of it), else 1.
-- A caller outside the queue then watches the lock for ARGV[2] ms, so that the next release
-- is announced even if nobody queues.
if redis.call('HEXISTS', KEYS[1], 'owner') == 0 then
  local head = queue_head()
  if not head or head == ARGV[1] then
    return 0
  end
end
if KEYS[2] and ARGV[1] == '' then
  local ms = tonumber(ARGV[2])
  if redis.call('PTTL', KEYS[4]) < ms then
    redis.call('SET', KEYS[4], '1', 'PX', ms)
  end
end
return 1
""",
)

SEMAPHORE_HELD = LuaScript(
    "semaphore_held",
    """
-- KEYS[1] holders. Returns the number of live holders (read-only: expired ones are not counted).
local now = redis.call('TIME')
local now_ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
return redis.call('ZCOUNT', KEYS[1], string.format('(%d', now_ms), '+inf')
""",
)

SEMAPHORE_TURN = LuaScript(
    "semaphore_turn",
    _SEMAPHORE_QUEUE
    + """
-- KEYS[1] holders; KEYS[3], KEYS[4] the queue (KEYS[2], the tokens, is not touched);
-- ARGV[1] a queued waiter; ARGV[2] the limit.
-- Returns 0 when ARGV[1] may take a slot now (or holds one), else 1: what a queued waiter's
-- `wait_released` checks. Expired holders are not counted (they are pruned by the next write).
local now_ms = server_ms()
if redis.call('ZSCORE', KEYS[1], ARGV[1]) then
  return 0
end
local held = redis.call('ZCOUNT', KEYS[1], string.format('(%d', now_ms), '+inf')
local free = tonumber(ARGV[2]) - held
if free > 0 and among_first(ARGV[1], free) then
  return 0
end
return 1
""",
)

# The inspection scripts only read; expired holders and queue entries are skipped, not pruned.
_NOW_MS = """
local now = redis.call('TIME')
local now_ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
local live = string.format('(%d', now_ms)
"""

LOCK_INFO = LuaScript(
    "lock_info",
    _NOW_MS
    + """
-- KEYS[1] lock key; KEYS[3] its queue's entry expiries (absent: no queue).
-- Returns nil when the lock is free, else {owner, token, ms left (PTTL), live waiters or -1
-- when the key has no queue}.
local lease = redis.call('HMGET', KEYS[1], 'owner', 'token')
if not lease[1] then
  return nil
end
local waiters = -1
if KEYS[3] then
  waiters = redis.call('ZCOUNT', KEYS[3], live, '+inf')
end
return {lease[1], tonumber(lease[2]), redis.call('PTTL', KEYS[1]), waiters}
""",
)

SEMAPHORE_INFO = LuaScript(
    "semaphore_info",
    _NOW_MS
    + """
-- KEYS[1] holders; KEYS[2] tokens; KEYS[4] the queue's entry expiries.
-- Returns {live waiters, then per live holder: owner, token, ms left, permits}.
local found = {redis.call('ZCOUNT', KEYS[4], live, '+inf')}
local holders = redis.call('ZRANGEBYSCORE', KEYS[1], live, '+inf', 'WITHSCORES')
for i = 1, #holders, 2 do
  local token = tonumber(redis.call('HGET', KEYS[2], 'o:' .. holders[i])) or 0
  local rest = {holders[i], token, tonumber(holders[i + 1]) - now_ms, 1}
  for j = 1, #rest do
    found[#found + 1] = rest[j]
  end
end
return found
""",
)
