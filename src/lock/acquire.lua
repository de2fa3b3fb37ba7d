-- acquire: grant the lock to a token if it is free and nobody is ahead of it in line; mint the
-- fencing token in the same step. Waiters keep their place without heartbeats: the line is
-- checked lazily, at handoff (common.lua's hand_off).
-- KEYS[1] lock (a string holding the owner token)  KEYS[2] state (hash: fence, holder, and
--         "next"/"next_until", the waiter a free lock is reserved for)  KEYS[3] queue (zset of
--         waiting tokens, oldest first)
-- ARGV[1] token  ARGV[2] ttl ms  ARGV[3] "1" to join the queue when not granted, "0" to try once
-- ARGV[4] ms until the waiter's next check, when the lock has no expiry  ARGV[5] wake channel
-- ARGV[6..9] holder host, pid, user, command
-- Returns {"ok", fence, ttl_ms}
--         {"busy", pttl_ms, now_ms, host, pid, user, since_ms, command}  (holder fields nil when
--                                                                       another client holds it)
--         {"queued", wait_ms, now_ms}  the lock is free but an earlier waiter goes first
--         {"wrongtype", type}          the key is not a string; nothing was changed
-- Errors (nothing was changed): WRONGTYPE for a helper key of another type or a fence counter
-- that cannot be raised, NOPERM for a command the ACL user may not run.
local lock, state, queue = KEYS[1], KEYS[2], KEYS[3]
local token, ttl, join, check, channel = ARGV[1], tonumber(ARGV[2]), ARGV[3] == "1", tonumber(ARGV[4]), ARGV[5]
local now = now_ms()

local kind = redis.call("TYPE", lock)["ok"]
if kind ~= "none" and kind ~= "string" then
  return {"wrongtype", kind}
end
-- Checks (common.lua), all before the first write.
expect_type(state, "hash", "state")
expect_type(queue, "zset", "queue")
local fence = fence_of(state)
expect_rights({{"SET", lock, token, "PX", "1"}, {"PEXPIRE", lock, "1"},
  {"PEXPIRE", state, "1"}, {"PEXPIRE", queue, "1"},
  {"HSET", state, "fence", "1"}, {"HDEL", state, "fence"},
  {"ZADD", queue, "NX", "1", token}, {"ZREM", queue, token}, {"PUBLISH", channel, "*"}})

-- Keeps (or takes) a place in line. The waiter checks again within `horizon` ms, so the line
-- lives that long and a while more.
local function wait_in_line(horizon)
  if join then
    redis.call("ZADD", queue, "NX", now, token)
    keep_alive(queue, horizon + KEEP_MS)
  end
end

local current = redis.call("GET", lock)
if current == token then
  -- Already ours: a retried acquire whose first reply was lost, or a reentrant one.
  redis.call("PEXPIRE", lock, ttl)
  keep_alive(state, ttl + KEEP_MS)
  if redis.call("HGET", state, "token") ~= token then
    fence = 0
  end
  return {"ok", fence, ttl}
end

if current then
  local pttl = redis.call("PTTL", lock)
  wait_in_line(pttl >= 0 and pttl or check)
  local h = redis.call("HMGET", state, "token", "host", "pid", "user", "since", "cmd")
  if h[1] ~= current then
    return {"busy", pttl, now}
  end
  return {"busy", pttl, now, h[2], h[3], h[4], h[5], h[6]}
end

-- Free. Reserved for another waiter whose claim window is open: wait for it.
local reserved = redis.call("HMGET", state, "next", "next_until")
local next_in_line, until_ms = reserved[1], tonumber(reserved[2]) or 0
if next_in_line and next_in_line ~= token then
  if until_ms > now then
    wait_in_line(until_ms - now)
    return {"queued", until_ms - now, now}
  end
  -- It did not claim the lock in time (it died, or missed its wake-up): it loses its turn.
  redis.call("ZREM", queue, next_in_line)
end
-- Someone else is first in line: the lock is theirs (a holder that expired handed nothing).
local head = redis.call("ZRANGE", queue, 0, 0)[1]
if head and head ~= token then
  hand_off(queue, state, channel, now)
  wait_in_line(CLAIM_MS)
  return {"queued", CLAIM_MS, now}
end

-- The fence rises with every grant, and also across a state that expired or was lost (FLUSHALL,
-- a restart without persistence, a failover that lost writes), as long as the server's clock
-- does not step back: it is at least the server's time in microseconds.
fence = math.max(fence + 1, now_us)
redis.call("SET", lock, token, "PX", ttl)
redis.call("HSET", state, "fence", fence, "token", token, "host", ARGV[6], "pid", ARGV[7],
  "user", ARGV[8], "cmd", ARGV[9], "since", now, "ttl", ttl)
redis.call("HDEL", state, "released", "broken", "next", "next_until")
redis.call("ZREM", queue, token)
keep_alive(state, ttl + KEEP_MS)
return {"ok", fence, ttl}
