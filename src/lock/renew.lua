-- renew: extend the lock if the token still owns it (to the TTL asked for, never shorter than
-- what it has left).
-- KEYS[1] lock  KEYS[2] state
-- ARGV[1] token  ARGV[2] ttl ms, or "" for the TTL the lock was last given
-- Returns {"renewed", ttl_ms (what it now has)} | {"free"} | {"other", pttl} | {"wrongtype", type}
local lock, state, token = KEYS[1], KEYS[2], ARGV[1]
local kind = redis.call("TYPE", lock)["ok"]
if kind ~= "none" and kind ~= "string" then
  return {"wrongtype", kind}
end
local current = redis.call("GET", lock)
if current ~= token then
  if current then
    return {"other", redis.call("PTTL", lock)}
  end
  return {"free"}
end
local ttl = tonumber(ARGV[2])
if ttl then
  if redis.call("HGET", state, "token") == token then
    redis.call("HSET", state, "ttl", ttl)
  end
else
  ttl = tonumber(redis.call("HGET", state, "ttl")) or 30000
end
-- Renewing extends: a lease is never shortened, so that a renew cannot cut short the lease an
-- rlock exec is counting on.
local left = redis.call("PTTL", lock)
if left >= 0 and left < ttl then
  redis.call("PEXPIRE", lock, ttl)
  left = ttl
end
return {"renewed", left}
