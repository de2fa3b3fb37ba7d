-- renew: extend the lock if the token still owns it (to the TTL asked for, never shorter than
-- what it has left).
-- KEYS[1] lock  KEYS[2] state
-- ARGV by name (common.lua's args): token; ttl (ms; absent for the TTL the lock was last given)
-- Returns a word, then fields by name (common.lua's reply):
--   "renewed" ttl [superseded host pid user cmd]
--                    extended: ttl is the lease it now has (ms); superseded (1) when a newer
--                    run asked this holder, whose grant asked for --cancel-running, to stop
--                    (slot.lua's supersede), and who that run is
--   "free" [broken]  nobody holds it: the lease ran out, or the lock was deleted; broken (1)
--                    when a forced release broke this token's lock (release.lua's record)
--   "other" pttl     someone else holds it
--   "wrongtype" type not a lock
--
-- A renewal must get through whatever happened to the helper keys and however full the server
-- is: it needs only the lock itself. The state (a record of the TTL and of when the lease was
-- last renewed, for inspect) is written last, and may be refused without harm.
local lock, state = KEYS[1], KEYS[2]
local a = args()
local token, asked_ttl = a.token, tonumber(a.ttl)
local kind, mode, is_lock = lock_kind(lock, state)
if mode then
  -- One holder of a semaphore or shared lock (multi.lua): its own lease, the key's expiry
  -- following the last lease. Written in the same order as below, PEXPIRE first.
  local now = now_ms()
  local ends = tonumber(redis.call("ZSCORE", lock, token))
  if not ends or ends <= now then
    if redis.call("ZCOUNT", lock, "(" .. now, "+inf") > 0 then
      return reply("other", "pttl", redis.call("PTTL", lock))
    end
    return reply("free")
  end
  local h = record_of(state, token)
  local ttl = math.floor(asked_ttl or (h and tonumber(h.ttl)) or 30000) -- JSON: a float in 5.4
  -- A shorter TTL leaves the lease, and the TTL it was last given, as they are.
  local extended = now + ttl > ends
  ends = math.max(ends, now + ttl)
  if redis.call("PTTL", lock) < ends - now then
    redis.call("PEXPIRE", lock, ends - now)
  end
  redis.call("ZADD", lock, "XX", ends, token)
  if h then
    if extended then
      h.ttl = ttl
    end
    h.renewed = now
    redis.pcall("HSET", state, "h:" .. token, cjson.encode(h))
  end
  keep_alive(state, ttl + KEEP_MS)
  return reply("renewed", "ttl", ends - now)
end
if not is_lock then
  return reply("wrongtype", "type", kind)
end
local current = redis.call("GET", lock)
if current ~= token then
  if current then
    return reply("other", "pttl", redis.call("PTTL", lock))
  end
  local broken = type_of(state) == "hash" and
    redis.call("HGET", state, "token") == token and redis.call("HGET", state, "broken")
  return reply("free", "broken", broken and 1)
end
-- The state is read only when it is rlock's record of this very token.
local recorded = holder_of(state, token)
local ttl = asked_ttl or (recorded and tonumber(recorded.ttl)) or 30000
-- Renewing extends: a lease is never shortened, so that a renew cannot cut short the lease an
-- rlock exec is counting on. PEXPIRE comes first: on a server out of memory (maxmemory with
-- noeviction) Redis refuses a script's first write when it may need memory (HSET does, PEXPIRE
-- does not), and lets any write through once the script has written.
local left = redis.call("PTTL", lock)
local extended = left >= 0 and left < ttl
if extended then
  redis.call("PEXPIRE", lock, ttl)
  left = ttl
end
if recorded then
  -- The state lives as long as the lease, and then a while (common.lua's KEEP_MS).
  keep_alive(state, ttl + KEEP_MS)
  -- When it was renewed, for inspect: the grant wrote the field, so this overwrites a number of
  -- the same size and needs no new memory; and it is best-effort (pcall), as is the TTL.
  -- The TTL the lock was last given changes only with the lease: a shorter --ttl leaves both.
  -- (One value of now_ms()'s two: as a call's last argument Lua would pass both.)
  local now = now_ms()
  if extended and asked_ttl and recorded.ttl ~= tostring(ttl) then
    redis.pcall("HSET", state, "renewed", now, "ttl", ttl)
  else
    redis.pcall("HSET", state, "renewed", now)
  end
  local fate = redis.call("HGET", state, "cancel") == token and
    redis.call("HGET", state, "x:" .. token)
  if fate then
    local ok, by = pcall(cjson.decode, fate)
    by = ok and type(by) == "table" and by or {}
    return reply("renewed", "ttl", left, "superseded", 1, "host", by.host, "pid", by.pid,
      "user", by.user, "cmd", by.cmd)
  end
end
return reply("renewed", "ttl", left)
