-- inspect: read a lock and what rlock knows of its holder, changing nothing.
-- KEYS[1] lock  KEYS[2] state  KEYS[3] queue
-- Returns the lock key's type ("none", "string", "hash" (e.g. a Redisson lock), "zset" or any
-- other Redis type), then fields by name (common.lua's reply; a field without a value is left
-- out): pttl now waiters (how many rlock processes wait in line), and
--   for a string: value (the owner token) and, only when rlock wrote them for this very value,
--     fence host pid user since cmd ttl (the lease it was last given) renewed (when the lease
--     was last renewed, or granted, by the server's clock) pidns (the holder's pid namespace);
--   for a semaphore or shared lock (multi.lua): fence mode ("limit" or "shared") limit (0 for
--     shared) holders (those whose lease runs, a list of fields each: token, ends (the lease's
--     end, server ms), record (multi.lua's JSON)).
local lock, state = KEYS[1], KEYS[2]
local now = now_ms()
local kind, mode = lock_kind(lock, state)
local waiters = 0
if redis.call("TYPE", KEYS[3])["ok"] == "zset" then
  waiters = redis.call("ZCARD", KEYS[3])
end
if kind == "none" then
  return reply(kind, "pttl", -2, "now", now, "waiters", waiters)
end
local pttl = redis.call("PTTL", lock)
if mode then
  -- Only holders whose lease runs (reading changes nothing; the next write drops the others).
  local live = {}
  for _, h in ipairs(holders_of(lock, state)) do
    if h.ends > now then
      live[#live + 1] = h
    end
  end
  return reply(kind, "pttl", pttl, "now", now, "waiters", waiters,
    "fence", tonumber(redis.call("HGET", state, "fence")), "mode", mode,
    "limit", tonumber(redis.call("HGET", state, "limit")) or 0, "holders", holders_field(live))
end
local value = kind == "string" and redis.call("GET", lock)
local h = value and holder_of(state, value) or {}
return reply(kind, "pttl", pttl, "now", now, "waiters", waiters, "value", value, "fence", h.fence,
  "host", h.host, "pid", h.pid, "user", h.user, "since", h.since, "cmd", h.cmd, "ttl", h.ttl,
  "renewed", h.renewed, "pidns", h.pidns)
