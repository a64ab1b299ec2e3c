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

Semaphore keys `{<prefix>:<key>}` (a sorted set: member = owner, score = expiry in server
milliseconds; pruned by every script) and `{<prefix>:<key>}:tokens` (a hash: `seq` = last token issued, `o:<owner>` =
that holder's token); the braces put both in one hash slot.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

__all__ = [
    "LOCK_ACQUIRE",
    "LOCK_HELD",
    "LOCK_RELEASE",
    "LOCK_RENEW",
    "SEMAPHORE_ACQUIRE",
    "SEMAPHORE_HELD",
    "SEMAPHORE_RELEASE",
    "SEMAPHORE_RENEW",
    "TOMBSTONE_MS",
    "LuaScript",
]

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
    + """
-- KEYS[1] lock key; ARGV[1] owner; ARGV[2] ttl (ms).
-- Returns the token (>= 1) when acquired or already held by ARGV[1] (its expiry refreshed);
-- -remaining ms when held by another owner; 0 when held with no expiry to report.
local bad = check_ttl(ARGV[2])
if bad then
  return bad
end
local lease = redis.call('HMGET', KEYS[1], 'owner', 'token')
if lease[1] == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return tonumber(lease[2])
end
if lease[1] then
  local left = redis.call('PTTL', KEYS[1])
  if left > 0 then
    return -left
  end
  return 0
end
local token = mint(lease[2])
redis.call('HSET', KEYS[1], 'owner', ARGV[1], 'token', token)
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return token
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
    """
-- KEYS[1] lock key; ARGV[1] owner; ARGV[2] tombstone (ms);
-- ARGV[3] 'PUBLISH', 'SPUBLISH' (Cluster) or '' (no notification).
-- Returns 1 when ARGV[1] held the lease (now free, its token kept as a tombstone), else 0.
-- It publishes before it writes: a server without SPUBLISH fails the script with nothing changed.
if redis.call('HGET', KEYS[1], 'owner') ~= ARGV[1] then
  return 0
end
if ARGV[3] ~= '' then
  redis.call(ARGV[3], KEYS[1], 'released')
end
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
    + _SEMAPHORE_PRELUDE
    + """
-- KEYS[1] holders (sorted set); KEYS[2] tokens (hash);
-- ARGV[1] owner; ARGV[2] ttl (ms); ARGV[3] limit; ARGV[4] tombstone (ms).
-- Returns the holder's token (>= 1): a new one, or the same one when ARGV[1] already holds a
-- slot (its expiry refreshed); when all `limit` slots are taken, -ms until the first frees.
local bad = check_ttl(ARGV[2])
if bad then
  return bad
end
local expires = now_ms + tonumber(ARGV[2])
local token = false
if redis.call('ZSCORE', KEYS[1], ARGV[1]) then
  token = tonumber(redis.call('HGET', KEYS[2], 'o:' .. ARGV[1]))
elseif redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[3]) then
  local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
  return -math.max(1, tonumber(first[2]) - now_ms)
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
    _SEMAPHORE_PRELUDE
    + """
-- KEYS[1] holders; KEYS[2] tokens; ARGV[1] owner; ARGV[2] tombstone (ms);
-- ARGV[3] 'PUBLISH', 'SPUBLISH' or ''.
-- Returns 1 when ARGV[1] held a live slot (now free), else 0.
if not redis.call('ZSCORE', KEYS[1], ARGV[1]) then
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
    """
-- KEYS[1] lock key. Returns 1 when someone holds the lock, else 0 (read-only).
return redis.call('HEXISTS', KEYS[1], 'owner')
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
