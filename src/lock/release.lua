-- release: delete the lock if the token owns it (compare-and-delete), or whoever owns it when
-- forced; then hand it to the first waiter in line (or wake anyone: "*", when nobody waits).
-- KEYS[1] lock  KEYS[2] state  KEYS[3] queue
-- ARGV[1] token  ARGV[2] wake channel  ARGV[3] "1" to force
-- Returns {"released"}                     the token owned it; it is gone
--         {"already"}                      this token released it before (a retried release;
--                                          not after a forced break, which is "expired")
--         {"expired"}                      the lock is free: the token's grant ran out
--         {"other", pttl}                  someone else holds it; nothing was changed
--         {"broken", type, pttl, value, host, pid, user, since_ms, command, now_ms}  (forced)
--         {"free"}                         forced, and nobody held it
--         {"brokenall", now_ms, token, lease end ms, record, ...}  (forced, a semaphore or
--                                          shared lock: every holder, multi.lua's records)
--         {"wrongtype", type}              not a lock; nothing was changed
-- Errors (nothing was changed): WRONGTYPE for a helper key of another type, NOPERM for a command
-- the ACL user may not run.
local lock, state, queue = KEYS[1], KEYS[2], KEYS[3]
local token, channel, force = ARGV[1], ARGV[2], ARGV[3] == "1"
local now = now_ms()

-- Checks (common.lua), all before the first write.
local kind = redis.call("TYPE", lock)["ok"]
local multi = kind == "zset" and redis.call("TYPE", state)["ok"] == "hash" and
  redis.call("HEXISTS", state, "mode") == 1
if kind ~= "none" and kind ~= "string" and not multi and not (force and kind == "hash") then
  return {"wrongtype", kind}
end
expect_type(state, "hash", "state")
expect_type(queue, "zset", "queue")
expect_rights({{"DEL", lock}, {"HSET", state, "released", "1"}, {"HDEL", state, "released"},
  {"ZREM", queue, token}, {"PUBLISH", channel, "*"}})

if multi then
  expect_rights({{"ZREM", lock, token}, {"HDEL", state, "h:"}})
  if force then
    drop_expired_holders(lock, state, now)
    local holders = holders_of(lock, state)
    if not holders[1] then
      return {"free"}
    end
    for i = 1, #holders, 3 do
      redis.call("HDEL", state, "h:" .. holders[i])
    end
    redis.call("DEL", lock)
    redis.call("HSET", state, "broken", now)
    hand_off(queue, state, channel, now)
    return {"brokenall", now, unpack(holders)}
  end
  local ends = tonumber(redis.call("ZSCORE", lock, token))
  if ends then
    redis.call("ZREM", lock, token)
    redis.call("HDEL", state, "h:" .. token)
    if ends > now then
      redis.call("HSET", state, "left", token)
      after_leaving(lock, state, queue, channel, now)
      return {"released"}
    end
    after_leaving(lock, state, queue, channel, now)
  elseif redis.call("HGET", state, "left") == token then
    return {"already"}
  end
  return {"expired"}
end

if force then
  if kind == "none" then
    return {"free"}
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
    hand_off(queue, state, channel, now)
    return {"broken", kind, pttl, value, h[2], h[3], h[4], h[5], h[6], now}
  end
  hand_off(queue, state, channel, now)
  return {"broken", kind, pttl, value}
end

local current = redis.call("GET", lock)
if current == token then
  redis.call("DEL", lock)
  redis.call("HSET", state, "released", now)
  hand_off(queue, state, channel, now)
  return {"released"}
end
if current then
  return {"other", redis.call("PTTL", lock)}
end
if redis.call("HGET", state, "token") == token and redis.call("HEXISTS", state, "released") == 1 then
  return {"already"}
end
if redis.call("HGET", state, "left") == token then
  return {"already"}
end
return {"expired"}
