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
issued, kept after release as a tombstone so that the next token is at least one more), and
fields for a caller outside the queue that watches the lock, the queue's mark (below) and the
shared holds: docs/redis.md has the table. While held, the key expires with the lease, so
`PTTL` is the remaining lease time.

Fair waiting (docs/redis.md, modelled on Redisson's fair lock): waiters on a lock form a FIFO
queue in two companion keys in the lock's hash slot (`_redis.companions` names them): `<q>` (a
sorted set: member = waiting owner, score = its arrival, server µs) and `<q>:t` (the server-ms
expiry of the entries of waiters that tried again while queued). An entry lives
`QUEUE_ENTRY_MS` from its arrival or its owner's last attempt, so a crashed waiter drops out.
A release hands a held lock straight to the live head of the queue (the head becomes the owner
and is told `h:<owner>` on the lock's channel; it takes its token with one more acquire), and
frees it only when nobody waits: an uncontended release publishes nothing, unless a caller
outside the queue watches the lock (field `w` of the lock's hash, see `LOCK_HELD`).

Semaphore keys `{<prefix>:<key>}` (a sorted set: member = owner, score = expiry in server
milliseconds; pruned by every script) and `{<prefix>:<key>}:tokens` (a hash: `seq` = last
token issued, `o:<owner>` = that holder's token, `p:<owner>` = its permits when more than one,
"x" = the permits held beyond one per holder, "l" = the limit of the latest grant); the braces
put them all in one hash slot. A key's held permits are ZCARD + "x". Its waiters queue in
`{<prefix>:<key>}:q` and `:q:t` (as a lock's) and `:q:p` (a hash: the permits a waiter asks
for, when more than one); `:q:w` is the watch key of waiters outside the queue. Free slots go
to the live entries in arrival order while they fit: a request that does not fit holds back
the later ones. A release announces the turn (`h:<owner>`, one message each) only to the
waiters that the freed slots now serve, and `released` only when somebody watches.
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


# A fresh token: the server time in microseconds (`now_us()`, which the script defines before
# this), or one more than the previous token when that is not smaller (two grants within one
# microsecond, or a clock that stepped back while the previous token was still remembered).
# ~1.7e15 today: far below 2**53 (~9.0e15).
_MINT = """
local function mint(previous)
  return math.max(now_us(), (tonumber(previous) or 0) + 1)
end
"""

# The ttl (ms, ARGV[2] in every script that writes) checked first, before any write: one that
# PEXPIRE accepts whatever the server time.
_TTL_CHECK = """
local ttl_ms = tonumber(ARGV[2])
if not ttl_ms or ttl_ms < 1 or ttl_ms > 1000000000000000 then
  return redis.error_reply('ERR invalid ttl (ms): must be between 1 and 1e15')
end
"""

# The lock's fair queue, in the lock key's hash slot (`_redis.companions`): `qa`, a sorted set
# of the waiting owners scored by their arrival (server time, µs), and `qe`, the entry expiry
# (server ms) of the waiters that tried again while queued. An entry lives QUEUE_ENTRY_MS from
# its arrival, or from its owner's last attempt (`qe`), whichever is later: a waiter that is
# gone (crashed, stuck) drops out, and a waiter that is still there refreshes its entry by
# trying again. The first attempt writes `qa` only; `qe` is written only by a waiter that waits
# long, and read only for an entry older than QUEUE_ENTRY_MS. Every script here reads the
# server clock at most once (`now_us`).
#
# The lock hash's field `q` (`mark`: as the script read it, false when absent) marks the queue:
# while the hash holds a token, the queue has no entry unless `q` is set. `join` sets it in a
# hash with a token; a write of a token that may find a queue (into a hash that had none, by
# a hand-off, or any fresh shared hold) sets it when absent (to 0); only a release that finds
# the queue empty deletes it. So an uncontended acquire and release skip the queue; a hash
# without a token says nothing. Its value is a server-ms time until which the queue key lives
# when it exists (0: unknown). Every entry lives `entry_ms` from its owner's last attempt, so the key must live
# that long from each attempt: when `q` says it does, `join` writes nothing but the entry (the
# common case: waiters join a queue that others keep); else it sets `q` two entry lives ahead
# and the key's expiry SLACK_MS beyond (a server may date an expiry from the script's start,
# before the TIME it read), so that the waiters of the next entry life write neither. A new
# key (this waiter alone in it) gets `q`'s expiry. With a token and no `q` the queue was
# empty: the key is new, and the waiter cannot exceed the bound (no ZCARD).
_LOCK_LIB = (
    f"""
local qa, qe = KEYS[2], KEYS[3]
local ENTRY_MS = {QUEUE_ENTRY_MS}
local SLACK_MS = 1000
local mark = false
local clock = false
local function now_us()
  if not clock then
    local now = redis.call('TIME')
    clock = tonumber(now[1]) * 1000000 + tonumber(now[2])
  end
  return clock
end
local function now_ms()
  return math.floor(now_us() / 1000)
end
"""
    + _MINT
    + """
-- How many ms the entry of `owner`, queued at `arrival` (µs), has left; <= 0: gone.
local function entry_left(owner, arrival)
  local left = math.floor(tonumber(arrival) / 1000) + ENTRY_MS - now_ms()
  if left > 0 then
    return left
  end
  local refreshed = redis.call('ZSCORE', qe, owner)
  return refreshed and tonumber(refreshed) - now_ms() or left
end
local function leave(owner)
  redis.call('ZREM', qa, owner)
  redis.call('ZREM', qe, owner)
end
-- Shared holds (KEYS[4], KEYS[5]; absent: the key has no queue, and no shared holds): `rs`,
-- a sorted set of the shared holders scored by their lease's expiry (server ms), their tokens
-- in the lock hash's fields `r:<owner>`, and the hash's field `r` (the latest expiry granted:
-- a hint that shared holders may live, so that an exclusive call that sees no `r` reads no
-- more); `qs`, the set of the queued owners that wait for a shared hold (the hash's field `s`
-- hints that it may be non-empty).
local rs, qs = KEYS[4], KEYS[5]
-- The number of live shared holders (expired ones dropped, with their tokens) and the ms
-- until the latest of them expires.
local function readers()
  if not rs then
    return 0, 0
  end
  local gone = redis.call('ZRANGEBYSCORE', rs, '-inf', now_ms())
  for i = 1, #gone do
    redis.call('HDEL', KEYS[1], 'r:' .. gone[i])
  end
  if #gone > 0 then
    redis.call('ZREMRANGEBYSCORE', rs, '-inf', now_ms())
  end
  local last = redis.call('ZRANGE', rs, -1, -1, 'WITHSCORES')
  if not last[1] then
    redis.call('HDEL', KEYS[1], 'r')
    return 0, 0
  end
  return redis.call('ZCARD', rs), tonumber(last[2]) - now_ms()
end
-- Record a shared hold of `owner` until `expires` (ms) with `token`, a fresh one (the key's
-- last token now), or false for a holder that asks again (it keeps its own); the keys live
-- as long as the latest shared hold (the lock hash at least as long as it did).
local function hold_shared(owner, token, expires)
  redis.call('ZADD', rs, expires, owner)
  local latest = tonumber(redis.call('ZRANGE', rs, -1, -1, 'WITHSCORES')[2])
  if token then
    redis.call('HSET', KEYS[1], 'token', token, 'r:' .. owner, token, 'r', latest, 'q', mark or 0)
  else
    redis.call('HSET', KEYS[1], 'r', latest)
  end
  redis.call('PEXPIRE', rs, latest - now_ms())
  if redis.call('PTTL', KEYS[1]) < latest - now_ms() then
    redis.call('PEXPIRE', KEYS[1], latest - now_ms())
  end
end
-- Give the free (or shared-held) lock to the shared requests at the head of the queue,
-- together: each becomes a shared holder with a fresh token, for as long as its entry had
-- left, and is told `h:<owner>`.
local function hand_to_readers(previous, publish)
  local entries = redis.call('ZRANGE', qa, 0, -1, 'WITHSCORES')
  local given = false
  for i = 1, #entries, 2 do
    local owner = entries[i]
    local left = entry_left(owner, entries[i + 1])
    if left > 0 then
      if redis.call('SISMEMBER', qs, owner) == 0 then
        break
      end
      if publish ~= '' then
        redis.call(publish, KEYS[1], 'h:' .. owner)
      end
      leave(owner)
      redis.call('SREM', qs, owner)
      if not given then
        redis.call('HDEL', KEYS[1], 'owner')  -- the exclusive holder that handed it on, if any
      end
      previous = mint(previous)
      hold_shared(owner, previous, now_ms() + left)
      given = true
    else
      leave(owner)
    end
  end
  return given
end
-- The live head of the queue and its entry's ms left (false when nobody waits); the gone
-- entries before it are dropped.
local function live_head()
  while true do
    local first = redis.call('ZRANGE', qa, 0, 0, 'WITHSCORES')
    if not first[1] then
      return false, 0
    end
    local left = entry_left(first[1], first[2])
    if left > 0 then
      return first[1], left
    end
    leave(first[1])
  end
end
-- Queue `owner` at the back (its arrival kept when it is queued already: then its entry is
-- refreshed), unless `bound` entries wait (gone ones count until the head reaches them or
-- the queue key expires, at most an entry life and SLACK_MS after the last entry's end).
-- `hashed`: the lock hash holds a token, so `q` is kept (see `mark`).
local function join(owner, entry_ms, bound, hashed)
  entry_ms = tonumber(entry_ms)
  local lives = tonumber(mark) or 0
  local new = false
  if redis.call('ZADD', qa, 'NX', now_us(), owner) == 1 then
    if mark or not hashed then
      local count = redis.call('ZCARD', qa)
      if count > tonumber(bound) then
        redis.call('ZREM', qa, owner)  -- full: this waiter keeps polling outside the queue
        return
      end
      new = count == 1
    end
  else
    redis.call('ZADD', qe, now_ms() + entry_ms, owner)
    redis.call('PEXPIRE', qe, entry_ms)
  end
  if lives < now_ms() + entry_ms then
    lives = now_ms() + 2 * entry_ms
    if hashed then
      mark = lives
      redis.call('HSET', KEYS[1], 'q', lives)
    end
  elseif not new then
    return
  end
  redis.call('PEXPIRE', qa, lives - now_ms() + SLACK_MS)
end
-- Give the free lock to the live head of the queue (false when nobody live waits): it becomes
-- the owner, with a fresh token, for as long as its entry had left (a head that is gone costs
-- no more than that), and leaves the queue; `publish` (PUBLISH, SPUBLISH, or '' for none) tells
-- it `h:<owner>`, and it takes the token and sets its own ttl by asking for the lock again.
-- The publish comes before the writes: on a server without SPUBLISH the script fails with
-- nothing changed but gone entries dropped.
local function hand_off(previous, publish, shared_waiting, reading)
  local head, left = live_head()
  if not head then
    return false
  end
  if shared_waiting and redis.call('SISMEMBER', qs, head) == 1 then
    return hand_to_readers(previous, publish)
  end
  if reading and readers() > 0 then
    return false  -- an exclusive head waits for the shared holders to leave
  end
  if publish ~= '' then
    redis.call(publish, KEYS[1], 'h:' .. head)
  end
  redis.call('ZREM', qa, head)
  redis.call('HSET', KEYS[1], 'owner', head, 'token', mint(previous), 'q', mark or 0)
  redis.call('PEXPIRE', KEYS[1], left)
  return true
end
"""
)

LOCK_ACQUIRE = LuaScript(
    "lock_acquire",
    _TTL_CHECK
    + _LOCK_LIB
    + """
-- KEYS[1] lock key; KEYS[2], KEYS[3] its queue (absent: no fair queue);
-- ARGV[1] owner; ARGV[2] ttl (ms); ARGV[3] queue entry ttl (ms), 0 to not join the queue;
-- ARGV[4] queue bound; ARGV[5] '1' for a shared hold (KEYS[4], KEYS[5]: the shared holders
-- and the shared waiters).
-- Returns the token (>= 1) when acquired or already held by ARGV[1] (its expiry set to the
-- ttl): also when a release handed the lock to ARGV[1], the head of its queue. Else
-- -remaining ms when held by another owner (-1 in the lease's last millisecond, where PTTL
-- says 0: the waiter tries again right after the expiry); when free but promised to the live
-- head of the queue (a lease that expired while waiters queue), -ms until the head's entry
-- expires; 0 only for a held key without an expiry. A refused caller with ARGV[3] > 0 joins
-- the queue (or refreshes its entry). The commands each case runs: docs/performance.md.
local lease = redis.call('HMGET', KEYS[1], 'owner', 'token', 'r', 'q')
if lease[1] == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return tonumber(lease[2])
end
mark = lease[4]
if ARGV[5] == '1' then
  -- A shared hold: refused while an exclusive lease is held, or an exclusive request waits
  -- ahead in the queue (readers never starve a writer); the shared requests ahead wait with it.
  if not lease[1] then
    local mine = redis.call('ZSCORE', rs, ARGV[1])
    if mine and tonumber(mine) > now_ms() then  -- held already (or handed to it): refreshed
      hold_shared(ARGV[1], false, now_ms() + tonumber(ARGV[2]))
      return tonumber(redis.call('HGET', KEYS[1], 'r:' .. ARGV[1]))
    end
    local ahead = false
    if redis.call('EXISTS', qa) == 1 then
      local entries = redis.call('ZRANGE', qa, 0, -1, 'WITHSCORES')
      for i = 1, #entries, 2 do
        if entries[i] == ARGV[1] then
          break
        end
        if entry_left(entries[i], entries[i + 1]) > 0 and redis.call('SISMEMBER', qs, entries[i]) == 0 then
          ahead = true
          break
        end
      end
    end
    if not ahead then
      leave(ARGV[1])
      redis.call('SREM', qs, ARGV[1])
      local token = mint(lease[2])
      hold_shared(ARGV[1], token, now_ms() + tonumber(ARGV[2]))
      return token
    end
  end
  if tonumber(ARGV[3]) > 0 then
    join(ARGV[1], ARGV[3], ARGV[4], lease[2])
    redis.call('SADD', qs, ARGV[1])
    redis.call('PEXPIRE', qs, ARGV[3])
    redis.call('HSET', KEYS[1], 's', 1)
    if redis.call('PTTL', KEYS[1]) < 0 then
      redis.call('PEXPIRE', KEYS[1], ARGV[3])
    end
  end
  return lease[1] and -math.max(redis.call('PTTL', KEYS[1]), 1) or 0
end
local head, left, count = false, 0, 0
if not lease[1] and lease[3] then
  count, left = readers()  -- shared holders: the exclusive request waits for the last to leave
end
if not lease[1] and count == 0 then
  local queued = qa and (mark or not lease[2]) and redis.call('EXISTS', qa) == 1
  if queued then
    head, left = live_head()
  end
  if not head or head == ARGV[1] then
    if head then
      leave(ARGV[1])
    end
    local token = mint(lease[2])
    if queued and not mark then  -- the hash's first token, with a queue
      redis.call('HSET', KEYS[1], 'owner', ARGV[1], 'token', token, 'q', 0)
    else
      redis.call('HSET', KEYS[1], 'owner', ARGV[1], 'token', token)
    end
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
    return token
  end
end
if qa and tonumber(ARGV[3]) > 0 then
  join(ARGV[1], ARGV[3], ARGV[4], lease[2])
end
if not lease[1] then
  return -math.max(1, left)
end
local remaining = redis.call('PTTL', KEYS[1])
if remaining >= 0 then
  return -math.max(remaining, 1)
end
return 0
""",
)


LOCK_RENEW = LuaScript(
    "lock_renew",
    _TTL_CHECK
    + """
-- KEYS[1] lock key; KEYS[2] its shared holders (absent: none); ARGV[1] owner; ARGV[2] ttl (ms).
-- Returns 1 when ARGV[1] holds the live lease, exclusive or shared (now expiring ttl from
-- now), else 0. Never acquires: an expired or released lease stays lost.
if redis.call('HGET', KEYS[1], 'owner') == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
local rs = KEYS[2]
if not rs then
  return 0
end
local expires = redis.call('ZSCORE', rs, ARGV[1])
local now = redis.call('TIME')
local now_ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
if not expires or tonumber(expires) <= now_ms then
  return 0
end
local until_ms = now_ms + tonumber(ARGV[2])
redis.call('ZADD', rs, until_ms, ARGV[1])
local latest = tonumber(redis.call('ZRANGE', rs, -1, -1, 'WITHSCORES')[2])
redis.call('HSET', KEYS[1], 'r', latest)
redis.call('PEXPIRE', rs, latest - now_ms)
if redis.call('PTTL', KEYS[1]) < latest - now_ms then
  redis.call('PEXPIRE', KEYS[1], latest - now_ms)
end
return 1
""",
)

LOCK_RELEASE = LuaScript(
    "lock_release",
    _LOCK_LIB
    + """
-- KEYS[1] lock key; KEYS[2], KEYS[3] its queue (absent: no queue); ARGV[1] owner;
-- ARGV[2] tombstone (ms); ARGV[3] 'PUBLISH', 'SPUBLISH' (Cluster) or '' (no notification).
-- Returns 1 when ARGV[1] held the lease (or had been handed it as the head of the queue),
-- else 0. A held lock goes straight to the live head of the queue (`hand_off`: one message,
-- to the head only); with nobody queued it is freed, its token kept as a tombstone, and a
-- caller outside the queue that watches it (field `w`, see LOCK_HELD) is told `released`. A
-- caller that does not hold the lease leaves the queue (a waiter that gave up, or whose
-- acquire was interrupted); a free lock it leaves (its lease expired meanwhile) goes to the
-- next live head. A publish fails (a server without SPUBLISH) before anything is freed.
local lease = redis.call('HMGET', KEYS[1], 'owner', 'token', 'w', 'r', 's', 'q')
mark = lease[6]
local shared_waiting = qs and lease[5]
local expires = not lease[1] and lease[4] and rs and redis.call('ZSCORE', rs, ARGV[1])
local held = 1
if lease[1] ~= ARGV[1] then
  if not expires then
    if qa and redis.call('ZREM', qa, ARGV[1]) == 1 then
      redis.call('ZREM', qe, ARGV[1])
      if shared_waiting then
        redis.call('SREM', qs, ARGV[1])
      end
      if not lease[1] then
        hand_off(lease[2], ARGV[3], shared_waiting, lease[4])
      end
    end
    return 0
  end
  -- A shared holder leaves (1 only if its hold was live); the last one out hands the lock
  -- on, or frees it, as the exclusive holder does.
  held = tonumber(expires) > now_ms() and 1 or 0
  redis.call('ZREM', rs, ARGV[1])
  redis.call('HDEL', KEYS[1], 'r:' .. ARGV[1])
  if readers() > 0 then
    return held
  end
end
if qa and (mark or not lease[2]) and hand_off(lease[2], ARGV[3], shared_waiting, false) then
  return held
end
if lease[3] and ARGV[3] ~= '' then
  redis.call(ARGV[3], KEYS[1], 'released')
end
redis.call('HDEL', KEYS[1], 'owner', 'w', 'q')
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return held
""",
)

# Every semaphore script that writes starts here: read the server clock (`now_ms`, and
# `now_us()` for `_MINT`), drop the holders whose lease has expired (their tokens and permits
# with them: `pruned` permits), and define `held_permits`
# (the permits live holders have, given the hash's `x`) and `set_expiries`, which sets the keys'
# expiries after a change: the last lease plus a tombstone, so that lapsed holders are still
# there to be pruned and the last token is remembered.
_SEMAPHORE_PRELUDE = """
local now = redis.call('TIME')
local now_ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
local function now_us()
  return tonumber(now[1]) * 1000000 + tonumber(now[2])
end
local expired = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now_ms)
local pruned = #expired  -- the permits of the expired holders (nobody announced them)
if #expired > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now_ms)
  for i = 1, #expired do
    local permits = redis.call('HGET', KEYS[2], 'p:' .. expired[i])
    if permits then
      redis.call('HINCRBY', KEYS[2], 'x', 1 - tonumber(permits))
      pruned = pruned + tonumber(permits) - 1
    end
    redis.call('HDEL', KEYS[2], 'o:' .. expired[i], 'p:' .. expired[i])
  end
end
local function held_permits(extra)
  local holders = redis.call('ZCARD', KEYS[1])
  -- Whatever `x` says: with no holder, nothing is held.
  return holders == 0 and 0 or holders + math.max(0, tonumber(extra) or 0)
end
local function set_expiries(tombstone)
  local horizon = tonumber(tombstone)
  local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
  if #last > 0 then
    horizon = horizon + tonumber(last[2]) - now_ms
    redis.call('PEXPIRE', KEYS[1], horizon)
  end
  redis.call('PEXPIRE', KEYS[2], horizon)
end
"""

# The semaphore's fair queue: `qa` (arrivals), `qe` (entry expiries), `qw` (the watch key of
# waiters outside the queue) and `qp` (the permits each waiter asks for, absent for one), all
# absent when a script is called with the holders and tokens only. Needs the prelude's `now_ms`.
_SEMAPHORE_QUEUE = """
local qa, qe, qw, qp = KEYS[3], KEYS[4], KEYS[5], KEYS[6]
-- Drop the expired entries (waiters that are gone) and what they asked for.
local function prune()
  local gone = redis.call('ZRANGEBYSCORE', qe, '-inf', now_ms)
  for i = 1, #gone do
    redis.call('ZREM', qa, gone[i])
    redis.call('HDEL', qp, gone[i])
  end
  if #gone > 0 then
    redis.call('ZREMRANGEBYSCORE', qe, '-inf', now_ms)
  end
end
-- Add `owner` asking for `permits` at the back (or refresh its entry), unless `bound` wait.
local function join(owner, entry_ms, bound, permits)
  if not redis.call('ZSCORE', qa, owner) then
    prune()  -- first, so that waiters that are gone never fill the bound
    if redis.call('ZCARD', qa) >= tonumber(bound) then
      return  -- full: this waiter keeps polling outside the queue
    end
    local last = redis.call('ZRANGE', qa, -1, -1, 'WITHSCORES')
    redis.call('ZADD', qa, (tonumber(last[2]) or 0) + 1, owner)
    if permits > 1 then
      redis.call('HSET', qp, owner, permits)
    end
  end
  redis.call('ZADD', qe, now_ms + tonumber(entry_ms), owner)
  -- Every entry lives the same QUEUE_ENTRY_MS, so the newest refresh outlives them all.
  redis.call('PEXPIRE', qa, entry_ms)
  redis.call('PEXPIRE', qe, entry_ms)
  if permits > 1 then
    redis.call('PEXPIRE', qp, entry_ms)
  end
end
-- Leave the queue; `permits` nil when unknown.
local function leave(owner, permits)
  redis.call('ZREM', qa, owner)
  redis.call('ZREM', qe, owner)
  if permits ~= 1 then
    redis.call('HDEL', qp, owner)
  end
end
-- The permits each of `owners` asks for (one when not recorded).
local function asks(owners)
  local wanted = {}
  if #owners > 0 then
    local recorded = redis.call('HMGET', qp, unpack(owners))
    for i = 1, #owners do
      wanted[i] = tonumber(recorded[i]) or 1
    end
  end
  return wanted
end
-- Whether `owner` may take `permits` of `free` free slots: when it and every live waiter
-- ahead of it fit in them (first come, first served: a request that does not fit holds back
-- the later ones), or, outside the queue, when the whole queue and it fit. Second result:
-- whether it is queued (it leaves the queue when it takes the slots).
local function fits(owner, permits, free)
  if permits > free then
    return false, false
  end
  if not qa or redis.call('EXISTS', qa) == 0 then
    return true, false  -- nobody waits: the common, uncontended case
  end
  prune()
  local arrival = redis.call('ZSCORE', qa, owner)
  -- How many arrived before it (ZCOUNT, which the ACL already allows, not ZRANK), or all.
  local ahead = arrival and redis.call('ZCOUNT', qa, '-inf', '(' .. arrival) or redis.call('ZCARD', qa)
  local queued = arrival and true or false
  if ahead + permits > free then
    return false, queued  -- even at one permit each, those ahead leave too few
  end
  if ahead > 0 and redis.call('EXISTS', qp) == 1 then
    local owners = redis.call('ZRANGE', qa, 0, ahead - 1)
    local wanted = permits
    for _, asked in ipairs(asks(owners)) do
      wanted = wanted + asked
      if wanted > free then
        return false, queued
      end
    end
  end
  return true, queued
end
-- Announce the turn of the queued waiters that `free` free slots serve (in arrival order,
-- until one does not fit) and that `already` free slots did not: one message each, so a
-- release wakes only as many waiters as its slots serve. Waiters outside the queue (`qw`)
-- hear `released`. Silent when nobody waits (no wasted PUBLISH).
local function serve(command, free, already)
  if command == '' or not qa or redis.call('EXISTS', qa, qw) == 0 then
    return
  end
  if free > already and free > 0 then
    prune()
    local owners = redis.call('ZRANGE', qa, 0, free - 1)  -- at most `free` fit
    local wanted = 0
    for i, asked in ipairs(asks(owners)) do
      wanted = wanted + asked
      if wanted > free then
        break
      end
      if wanted > already then
        redis.call(command, KEYS[1], 'h:' .. owners[i])
      end
    end
  end
  if redis.call('EXISTS', qw) == 1 then
    redis.call(command, KEYS[1], 'released')
  end
end
"""

SEMAPHORE_ACQUIRE = LuaScript(
    "semaphore_acquire",
    _TTL_CHECK
    + _SEMAPHORE_PRELUDE
    + _MINT
    + _SEMAPHORE_QUEUE
    + """
-- KEYS[1] holders (sorted set); KEYS[2] tokens (hash); KEYS[3..6] the queue;
-- ARGV[1] owner; ARGV[2] ttl (ms); ARGV[3] limit; ARGV[4] tombstone (ms);
-- ARGV[5] queue entry ttl (ms), 0 to not join the queue; ARGV[6] queue bound;
-- ARGV[7] permits (1 <= permits <= limit; absent: 1).
-- Returns the holder's token (>= 1): a new one, or the same one when ARGV[1] already holds
-- (its expiry refreshed, its permits unchanged); when too few slots are free, -ms until the
-- first holder's lease ends; 0 when enough are free but promised to waiters ahead of ARGV[1].
-- A refused caller with ARGV[5] > 0 joins the queue (or refreshes its entry).
local permits = tonumber(ARGV[7]) or 1
local limit = tonumber(ARGV[3])
if permits < 1 or permits > limit then
  return redis.error_reply('ERR invalid permits: must be between 1 and the limit')
end
local state = redis.call('HMGET', KEYS[2], 'o:' .. ARGV[1], 'seq', 'x')
local token = tonumber(state[1])  -- a holder that asks again keeps its token
if not token then
  local held = held_permits(state[3])
  local free = limit - held
  local may, queued = fits(ARGV[1], permits, free)
  if not may then
    if qa and tonumber(ARGV[5]) > 0 then
      join(ARGV[1], ARGV[5], ARGV[6], permits)
    end
    local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
    if permits <= free or #first == 0 then
      return 0
    end
    return -math.max(1, tonumber(first[2]) - now_ms)
  end
  if queued then
    leave(ARGV[1], permits)
  end
  token = mint(state[2])
  local extra = permits - 1 + (held > 0 and tonumber(state[3]) or 0)  -- `x` counts from 0 when nobody holds
  redis.call('HSET', KEYS[2], 'seq', token, 'o:' .. ARGV[1], token, 'l', limit, 'x', extra)
  if permits > 1 then
    redis.call('HSET', KEYS[2], 'p:' .. ARGV[1], permits)
  end
end
redis.call('ZADD', KEYS[1], now_ms + tonumber(ARGV[2]), ARGV[1])
set_expiries(ARGV[4])
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
if not redis.call('ZSCORE', KEYS[1], ARGV[1]) then
  return 0
end
redis.call('ZADD', KEYS[1], now_ms + tonumber(ARGV[2]), ARGV[1])
set_expiries(ARGV[3])
return 1
""",
)

SEMAPHORE_RELEASE = LuaScript(
    "semaphore_release",
    _SEMAPHORE_PRELUDE
    + _SEMAPHORE_QUEUE
    + """
-- KEYS[1] holders; KEYS[2] tokens; KEYS[3..6] the queue; ARGV[1] owner;
-- ARGV[2] tombstone (ms); ARGV[3] 'PUBLISH', 'SPUBLISH' or ''.
-- Returns 1 when ARGV[1] held live slots (now free), else 0. It wakes only the queued
-- waiters that the freed slots serve. A caller that holds no slot leaves the queue instead
-- (a waiter that gave up), and the waiters the free slots now serve are woken. A holder's
-- release announces before it frees: a server without SPUBLISH fails the script with nothing
-- changed but expired holders and queue entries dropped.
local state = redis.call('HMGET', KEYS[2], 'o:' .. ARGV[1], 'p:' .. ARGV[1], 'x', 'l')
local limit = tonumber(state[4]) or 0
if not state[1] then
  if qa and redis.call('ZSCORE', qa, ARGV[1]) then
    leave(ARGV[1], nil)
    serve(ARGV[3], limit - held_permits(state[3]), 0)
  end
  return 0
end
local permits = tonumber(state[2]) or 1
local free = limit - held_permits(state[3]) + permits
serve(ARGV[3], free, free - permits - pruned)  -- slots of lapsed holders are news too
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('HDEL', KEYS[2], 'o:' .. ARGV[1], 'p:' .. ARGV[1])
if permits > 1 then
  redis.call('HINCRBY', KEYS[2], 'x', 1 - permits)
end
set_expiries(ARGV[2])
return 1
""",
)

LOCK_HELD = LuaScript(
    "lock_held",
    _LOCK_LIB
    + """
-- KEYS[1] lock key; KEYS[2], KEYS[3] its queue (absent: no queue);
-- ARGV[1] the waiting owner ('' for a caller outside the queue).
-- Returns 0 when ARGV[1] may take the lock now (a release handed it to ARGV[1], or it is free
-- with nobody live ahead of it), else 1. A caller outside the queue then watches the held
-- lock (field `w`), so that its release is announced even if nobody queues; a lock that
-- expires instead is announced to nobody (the caller's own timeout ends its wait).
local lease = redis.call('HMGET', KEYS[1], 'owner', 'r')
if lease[1] == ARGV[1] then
  return 0
end
local held = lease[1]
if not held and lease[2] and rs then  -- shared holders may live: 0 for one of them
  local mine = ARGV[1] ~= '' and redis.call('ZSCORE', rs, ARGV[1])
  if mine and tonumber(mine) > now_ms() then
    return 0
  end
  held = redis.call('ZCOUNT', rs, string.format('(%d', now_ms()), '+inf') > 0
end
if held then
  if ARGV[1] == '' then
    redis.call('HSET', KEYS[1], 'w', 1)
  end
  return 1
end
local head = qa and redis.call('EXISTS', qa) == 1 and live_head()
return head and head ~= ARGV[1] and 1 or 0
""",
)


SEMAPHORE_HELD = LuaScript(
    "semaphore_held",
    """
-- KEYS[1] holders; KEYS[5] the watch key (absent: no watch); ARGV[1] how long the caller
-- waits (ms). Returns the number of live holders (expired ones are not counted); when there
-- are some, a caller outside the queue watches the key for ARGV[1] ms, so that the next
-- release is announced to it.
local now = redis.call('TIME')
local now_ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
local holders = redis.call('ZCOUNT', KEYS[1], string.format('(%d', now_ms), '+inf')
if holders > 0 and KEYS[5] then
  local ms = tonumber(ARGV[1])
  if redis.call('PTTL', KEYS[5]) < ms then
    redis.call('SET', KEYS[5], '1', 'PX', ms)
  end
end
return holders
""",
)

SEMAPHORE_TURN = LuaScript(
    "semaphore_turn",
    _SEMAPHORE_PRELUDE
    + _SEMAPHORE_QUEUE
    + """
-- KEYS[1] holders; KEYS[2] tokens; KEYS[3..6] the queue; ARGV[1] a queued waiter;
-- ARGV[2] the limit; ARGV[3] the permits it asks for (absent: 1).
-- Returns 0 when ARGV[1] may take its slots now (or holds some), else 1: what a queued
-- waiter's `wait_released` checks.
local state = redis.call('HMGET', KEYS[2], 'o:' .. ARGV[1], 'x')
if state[1] then
  return 0
end
return fits(ARGV[1], tonumber(ARGV[3]) or 1, tonumber(ARGV[2]) - held_permits(state[2])) and 0 or 1
""",
)

# The inspection scripts only read; expired holders and queue entries are skipped, not pruned.
LOCK_INFO = LuaScript(
    "lock_info",
    _LOCK_LIB
    + """
-- KEYS[1] lock key; KEYS[2] its queue's arrivals (µs), KEYS[3] the refreshed entry expiries
-- (ms) (both absent: the key has no queue); KEYS[4] its shared holders. Returns nil when the
-- lock is free, else {live waiters or -1 when the key has no queue, 'exclusive' or 'shared',
-- then per holder: owner, token, ms left}; an entry is live as the lock scripts' entry_left
-- decides.
local lease = redis.call('HMGET', KEYS[1], 'owner', 'token', 'r')
local found = {}
if lease[1] then
  found = {lease[1], tonumber(lease[2]), redis.call('PTTL', KEYS[1])}
elseif lease[3] and rs then
  local holders = redis.call('ZRANGEBYSCORE', rs, string.format('(%d', now_ms()), '+inf', 'WITHSCORES')
  for i = 1, #holders, 2 do
    local token = tonumber(redis.call('HGET', KEYS[1], 'r:' .. holders[i])) or 0
    local rest = {holders[i], token, tonumber(holders[i + 1]) - now_ms()}
    for j = 1, #rest do
      found[#found + 1] = rest[j]
    end
  end
end
if #found == 0 then
  return nil
end
local waiters = -1
if qa then
  waiters = 0
  local entries = redis.call('ZRANGE', qa, 0, -1, 'WITHSCORES')
  for i = 1, #entries, 2 do
    if entry_left(entries[i], entries[i + 1]) > 0 then
      waiters = waiters + 1
    end
  end
end
table.insert(found, 1, waiters)
table.insert(found, 2, lease[1] and 'exclusive' or 'shared')
return found
""",
)

SEMAPHORE_INFO = LuaScript(
    "semaphore_info",
    """
-- KEYS[1] holders; KEYS[2] tokens; KEYS[4] the queue's entry expiries.
-- Returns {live waiters, then per live holder: owner, token, ms left, permits}.
local now = redis.call('TIME')
local now_ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
local live = string.format('(%d', now_ms)
local found = {redis.call('ZCOUNT', KEYS[4], live, '+inf')}
local holders = redis.call('ZRANGEBYSCORE', KEYS[1], live, '+inf', 'WITHSCORES')
for i = 1, #holders, 2 do
  local state = redis.call('HMGET', KEYS[2], 'o:' .. holders[i], 'p:' .. holders[i])
  local rest = {holders[i], tonumber(state[1]) or 0, tonumber(holders[i + 1]) - now_ms, tonumber(state[2]) or 1}
  for j = 1, #rest do
    found[#found + 1] = rest[j]
  end
end
return found
""",
)
