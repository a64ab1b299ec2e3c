"""The rate limiter's Lua scripts: one per algorithm, each the arithmetic of `_algorithms.py`.

They keep the rules of the lock scripts (`resilience/stores/_redis_scripts.py`): one key per
call (Redis Cluster needs no hash tags), the server's `TIME` is the only clock, numbers go to
`redis.call` as Lua numbers and come back as integer replies (never `tostring`, `..` or
`cjson`, which keep 14 significant digits), and no key is left without an expiry.

Time is in microseconds: `now` (about 1.7e15) and every stored time stay far below 2**53, so
doubles hold them exactly; the per-permit interval may carry a fraction of a microsecond and
is stored with it (Redis formats a Lua number with 17 significant digits, which round-trips).
Every script replies 0 when the permits were granted, else the whole microseconds until they
could be (rounded up, at least 1) — an integer reply, so nothing is lost in transit.
"""

from __future__ import annotations

from resilience.stores._redis_scripts import LuaScript

__all__ = ["FIXED_WINDOW", "SCRIPTS", "SLIDING_WINDOW", "TOKEN_BUCKET"]

_NOW = """
local now = redis.call('TIME')
local now_us = tonumber(now[1]) * 1000000 + tonumber(now[2])
"""

# Checked before any write (the stores validate first; this keeps a script that is called with
# other arguments from failing half-way, which would keep its writes): every expiry the script
# will set is between 1 ms and 1e12 ms, which `PEXPIRE` and `SET PX` accept and Lua formats
# without an exponent.
_CHECK = """
local function bad_us(us)
  return not us or us < 1 or us > 1e15
end
"""

TOKEN_BUCKET = LuaScript(
    "ratelimit_token_bucket",
    _NOW
    + _CHECK
    + """
-- GCRA. KEYS[1] a string: the theoretical arrival time (us), expiring when the bucket is full.
-- ARGV[1] interval (us per permit, >= 1); ARGV[2] burst; ARGV[3] permits.
local interval = tonumber(ARGV[1])
if not interval or interval < 1 or bad_us(interval * tonumber(ARGV[2])) then
  return redis.error_reply('ERR invalid rate limit arguments: interval (us) >= 1, interval * burst <= 1e15')
end
local tat = math.max(tonumber(redis.call('GET', KEYS[1])) or now_us, now_us)
local new_tat = tat + interval * tonumber(ARGV[3])
local wait = new_tat - interval * tonumber(ARGV[2]) - now_us
if wait > 0.001 then
  return math.ceil(wait)
end
redis.call('SET', KEYS[1], new_tat, 'PX', math.max(1, math.ceil((new_tat - now_us) / 1000)))
return 0
""",
)

SLIDING_WINDOW = LuaScript(
    "ratelimit_sliding_window",
    _NOW
    + _CHECK
    + """
-- Sliding log. KEYS[1] a list of grant times (us), newest first, one entry per permit,
-- expiring `per` after the newest. ARGV[1] per (us); ARGV[2] limit; ARGV[3] permits (<= 1,000).
local per = tonumber(ARGV[1])
local permits = tonumber(ARGV[3])
if bad_us(per) or not permits or permits > 1000 then
  return redis.error_reply('ERR invalid rate limit arguments: per (us) in [1, 1e15], permits <= 1000')
end
-- Drop the grants that left the window: the first expired one is found by bisection (the log
-- is newest first), and everything from it on goes in one LTRIM.
local horizon = now_us - per + 0.001
local lo, hi = 0, redis.call('LLEN', KEYS[1])
while lo < hi do
  local mid = math.floor((lo + hi) / 2)
  if tonumber(redis.call('LINDEX', KEYS[1], mid)) > horizon then
    lo = mid + 1
  else
    hi = mid
  end
end
if lo == 0 then
  redis.call('DEL', KEYS[1])
else
  redis.call('LTRIM', KEYS[1], 0, lo - 1)
end
local over = lo + permits - tonumber(ARGV[2])
if over > 0 then
  -- The `over` oldest grants must leave the window; the last of them is `over` from the tail.
  local leaves = tonumber(redis.call('LINDEX', KEYS[1], -over)) + per
  return math.max(1, math.ceil(leaves - now_us))
end
local stamps = {}
for i = 1, permits do
  stamps[i] = now_us
end
redis.call('LPUSH', KEYS[1], unpack(stamps))
redis.call('PEXPIRE', KEYS[1], math.ceil(per / 1000))
return 0
""",
)

FIXED_WINDOW = LuaScript(
    "ratelimit_fixed_window",
    _NOW
    + _CHECK
    + """
-- Fixed window. KEYS[1] a hash: e = the window's end (us), n = permits taken in it; it expires
-- with the window. ARGV[1] per (us); ARGV[2] limit; ARGV[3] permits.
if bad_us(tonumber(ARGV[1])) then
  return redis.error_reply('ERR invalid rate limit arguments: per (us) in [1, 1e15]')
end
local window = redis.call('HMGET', KEYS[1], 'e', 'n')
local ends = tonumber(window[1])
local taken = tonumber(window[2]) or 0
local fresh = not ends or ends <= now_us + 0.001
if fresh then
  ends, taken = now_us + tonumber(ARGV[1]), 0
end
taken = taken + tonumber(ARGV[3])
if taken > tonumber(ARGV[2]) then
  return math.max(1, math.ceil(ends - now_us))
end
redis.call('HSET', KEYS[1], 'e', ends, 'n', taken)
if fresh then
  redis.call('PEXPIRE', KEYS[1], math.ceil((ends - now_us) / 1000))
end
return 0
""",
)

SCRIPTS = {"token_bucket": TOKEN_BUCKET, "sliding_window": SLIDING_WINDOW, "fixed_window": FIXED_WINDOW}
"""The script of each algorithm."""
