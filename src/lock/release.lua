-- release: delete the lock if the token owns it (compare-and-delete), or whoever owns it when
-- forced; then hand it to the first waiter in line (or wake anyone: "*", when nobody waits).
-- KEYS[1] lock  KEYS[2] state  KEYS[3] queue
-- ARGV[1] token  ARGV[2] wake channel  ARGV[3] "1" to force
-- Returns a word, then fields by name (common.lua's reply; a field without a value is left out):
--   "released"                    the token owned it; it is gone
--   "already"                     this token released it before (a retried release; not after
--                                 a forced break, which is "expired")
--   "expired"                     the lock is free: the token's grant ran out
--   "other" pttl                  someone else holds it; nothing was changed
--   "broken" type pttl value host pid user since cmd now
--                                 forced: what was there (the holder fields only when rlock
--                                 wrote them for this very value)
--   "free"                        forced, and nobody held it
--   "brokenall" now holders       forced, a semaphore or shared lock: every holder, a list of
--                                 fields each (token, ends: its lease end in server ms, record:
--                                 multi.lua's JSON)
--   "wrongtype" type              not a lock; nothing was changed
-- Errors (nothing was changed): WRONGTYPE for a helper key of another type, NOPERM for a command
-- the ACL user may not run.
local lock, state, queue = KEYS[1], KEYS[2], KEYS[3]
local token, channel, force = ARGV[1], ARGV[2], ARGV[3] == "1"
local now = now_ms()

-- Checks (common.lua), all before the first write.
local kind = redis.call("TYPE", lock)["ok"]
local multi = multi_mode(kind, state)
if kind ~= "none" and kind ~= "string" and not multi and not (force and kind == "hash") then
  return reply("wrongtype", "type", kind)
end
expect_type(state, "hash", "state")
expect_type(queue, "zset", "queue")
expect_rights({{"DEL", lock}, {"HSET", state, "released", "1"}, {"HDEL", state, "released"},
  {"PEXPIRE", state, "1"}, {"ZREM", queue, token}, {"PUBLISH", channel, "*"}})

if multi then
  expect_rights({{"ZREM", lock, token}, {"HDEL", state, "h:"}})
  if force then
    drop_expired_holders(lock, state, now)
    local holders = holders_of(lock, state)
    if not holders[1] then
      return reply("free")
    end
    for _, h in ipairs(holders) do
      redis.call("HDEL", state, "h:" .. h.token)
    end
    redis.call("DEL", lock)
    redis.call("HSET", state, "broken", now)
    hand_off(queue, state, channel, now)
    keep_at_most(state, AFTER_RELEASE_MS)
    return reply("brokenall", "now", now, "holders", holders_field(holders))
  end
  local ends = tonumber(redis.call("ZSCORE", lock, token))
  if ends then
    redis.call("ZREM", lock, token)
    redis.call("HDEL", state, "h:" .. token)
    if ends > now then
      redis.call("HSET", state, "left", token)
      after_leaving(lock, state, queue, channel, now)
      shorten_state(lock, state, now)
      return reply("released")
    end
    after_leaving(lock, state, queue, channel, now)
    shorten_state(lock, state, now)
  elseif redis.call("HGET", state, "left") == token then
    return reply("already")
  end
  return reply("expired")
end

if force then
  if kind == "none" then
    return reply("free")
  end
  local pttl = redis.call("PTTL", lock)
  local value = false
  if kind == "string" then
    value = redis.call("GET", lock)
  end
  local h = redis.call("HMGET", state, "token", "host", "pid", "user", "since", "cmd")
  redis.call("DEL", lock)
  if value and h[1] == value then
    -- Broken, not released: the owner's own release must still hear that it lost the lock.
    redis.call("HDEL", state, "released")
    redis.call("HSET", state, "broken", now)
  else
    h = {}
  end
  hand_off(queue, state, channel, now)
  keep_at_most(state, AFTER_RELEASE_MS)
  return reply("broken", "type", kind, "pttl", pttl, "value", value, "host", h[2], "pid", h[3],
    "user", h[4], "since", h[5], "cmd", h[6], "now", now)
end

local current = redis.call("GET", lock)
if current == token then
  redis.call("DEL", lock)
  redis.call("HSET", state, "released", now)
  hand_off(queue, state, channel, now)
  keep_at_most(state, AFTER_RELEASE_MS)
  return reply("released")
end
if current then
  return reply("other", "pttl", redis.call("PTTL", lock))
end
if redis.call("HGET", state, "token") == token and redis.call("HEXISTS", state, "released") == 1 then
  return reply("already")
end
if redis.call("HGET", state, "left") == token then
  return reply("already")
end
return reply("expired")
