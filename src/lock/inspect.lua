-- inspect: read a lock and what rlock knows of its holder, changing nothing.
-- KEYS[1] lock  KEYS[2] state  KEYS[3] queue
-- Returns {type, pttl_ms, now_ms, value, fence, host, pid, user, since_ms, command, ttl_ms,
--          waiters, renewed_ms, nil, nil, pidns}  (waiters: how many rlock processes wait in
--          line; renewed_ms: when the lease was last renewed, or granted, by the server's clock;
--          pidns: the holder's pid namespace, where the two nils of a semaphore's mode and
--          limit would be)
--   type is "none", "string", "hash" (e.g. a Redisson lock) or any other Redis type; value is
--   the string's value (the owner token); the holder fields are nil unless rlock wrote them for
--   this very value.
-- A semaphore or shared lock (multi.lua) answers {"zset", pttl_ms, now_ms, nil, fence, nil x6,
--   waiters, nil, mode, limit, token, lease end ms, record, token, ...}, one triple per holder.
local lock, state = KEYS[1], KEYS[2]
local now = now_ms()
local kind = redis.call("TYPE", lock)["ok"]
local waiters = 0
if redis.call("TYPE", KEYS[3])["ok"] == "zset" then
  waiters = redis.call("ZCARD", KEYS[3])
end
if kind == "none" then
  return {kind, -2, now, false, false, false, false, false, false, false, false, waiters, false}
end
local pttl = redis.call("PTTL", lock)
if kind == "zset" and redis.call("TYPE", state)["ok"] == "hash" and
    redis.call("HEXISTS", state, "mode") == 1 then
  local live = {}
  for i, v in ipairs(holders_of(lock, state)) do
    live[i] = v
  end
  local out = {kind, pttl, now, false, tonumber(redis.call("HGET", state, "fence")) or false,
    false, false, false, false, false, false, waiters, false, redis.call("HGET", state, "mode"),
    tonumber(redis.call("HGET", state, "limit")) or 0}
  -- Only holders whose lease runs (reading changes nothing; the next write drops the others).
  for i = 1, #live, 3 do
    if live[i + 1] > now then
      out[#out + 1] = live[i]
      out[#out + 1] = live[i + 1]
      out[#out + 1] = live[i + 2]
    end
  end
  return out
end
if kind ~= "string" then
  return {kind, pttl, now, false, false, false, false, false, false, false, false, waiters, false}
end
local value = redis.call("GET", lock)
local h = {false, false, false, false, false, false, false, false, false}
if redis.call("TYPE", state)["ok"] == "hash" then
  h = redis.call("HMGET", state, "token", "fence", "host", "pid", "user", "since", "cmd", "ttl",
    "renewed", "pidns")
end
if h[1] ~= value then
  return {kind, pttl, now, value, false, false, false, false, false, false, false, waiters, false}
end
return {kind, pttl, now, value, h[2], h[3], h[4], h[5], h[6], h[7], h[8], waiters, h[9], false,
  false, h[10]}
