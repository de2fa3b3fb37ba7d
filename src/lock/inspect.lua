-- inspect: read a lock and what rlock knows of its holder, changing nothing.
-- KEYS[1] lock  KEYS[2] state  KEYS[3] queue
-- Returns the lock key's type ("none", "string", "hash" (e.g. a Redisson lock), "zset" or any
-- other Redis type), then fields by name (common.lua's reply; a field without a value is left
-- out): pttl now waiters (how many rlock processes wait in line) line (the first LINE_MAX of
-- them in line order, a list of fields each: host pid user cmd, as slot.lua's wait_in_line
-- keeps them, and since, when the waiter joined the line, server ms), and
--   for a string: value (the owner token) and, only when rlock wrote them for this very value,
--     fence host pid user since cmd ttl (the lease it was last given) renewed (when the lease
--     was last renewed, or granted, by the server's clock) pidns (the holder's pid namespace)
--     hold_until (--hold-at-least: no one else gets the lock before then, server ms) released
--     (when its holder released it, server ms, if it did: the lock stays until hold_until);
--   for a semaphore or shared lock (multi.lua): fence mode ("limit" or "shared") limit (0 for
--     shared) holders (those whose lease runs, a list of fields each: token, ends (the lease's
--     end, server ms), record (multi.lua's JSON)).
local lock, state = KEYS[1], KEYS[2]
local now = now_ms()
local kind, mode = lock_kind(lock, state)
-- The most waiters listed: a reply of bounded size, however long the line.
local LINE_MAX = 100
local waiters = 0
local line = {}
if type_of(KEYS[3]) == "zset" then
  waiters = redis.call("ZCARD", KEYS[3])
  local queued = redis.call("ZRANGE", KEYS[3], 0, LINE_MAX - 1, "WITHSCORES")
  local records = type_of(state) == "hash"
  for i = 1, #queued, 2 do
    local w = {}
    if records then
      local ok, decoded = pcall(cjson.decode, redis.call("HGET", state, "w:" .. queued[i]) or "")
      if ok and type(decoded) == "table" then
        w = decoded
      end
    end
    line[#line + 1] = named("host", w.host, "pid", w.pid, "user", w.user, "cmd", w.cmd,
      "since", math.floor(tonumber(queued[i + 1])))
  end
end
if kind == "none" then
  return reply(kind, "pttl", -2, "now", now, "waiters", waiters, "line", line)
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
  return reply(kind, "pttl", pttl, "now", now, "waiters", waiters, "line", line,
    "fence", tonumber(redis.call("HGET", state, "fence")), "mode", mode,
    "limit", tonumber(redis.call("HGET", state, "limit")) or 0, "holders", holders_field(live))
end
local value = kind == "string" and redis.call("GET", lock)
local h = value and holder_of(state, value) or {}
local held = h.fence and redis.call("HMGET", state, "hold_until", "released") or {}
return reply(kind, "pttl", pttl, "now", now, "waiters", waiters, "line", line, "value", value,
  "fence", h.fence, "host", h.host, "pid", h.pid, "user", h.user, "since", h.since, "cmd", h.cmd,
  "ttl", h.ttl, "renewed", h.renewed, "pidns", h.pidns, "hold_until", held[1],
  "released", held[2])
