-- acquire: grant the lock to a token if it is free and nobody is ahead of it in line; mint the
-- fencing token in the same step. Waiters keep their place without heartbeats: the line is
-- checked lazily, at handoff (common.lua's hand_off).
-- KEYS[1] lock (a string holding the owner token)  KEYS[2] state (hash: fence, holder, and
--         "next"/"next_until", the waiter a free lock is reserved for)  KEYS[3] queue (zset of
--         waiting tokens, oldest first)
-- ARGV[1] token  ARGV[2] ttl ms  ARGV[3] "1" to join the queue when not granted, "0" to try once
-- ARGV[4] ms until the waiter's next check, when the lock has no expiry  ARGV[5] wake channel
-- ARGV[6..9] holder host, pid, user, command
-- ARGV[10] "" for an exclusive lock, "limit" for a semaphore, "shared" for a shared lock
-- ARGV[11] the semaphore's N
-- ARGV[12] the holder's pid namespace (for inspect's stale check; may be empty)
-- Returns {"ok", fence, ttl_ms}
--         {"busy", pttl_ms, now_ms, host, pid, user, since_ms, command, holders, limit, ahead}
--              (holder fields nil when another client holds it; with several holders, the one
--              whose lease ends first, how many there are and the limit, 0 for shared; ahead
--              is 1 when a shared request waits because an exclusive one is ahead of it)
--         {"queued", wait_ms, now_ms}  the lock is free but an earlier waiter goes first
--         {"mismatch", kind}           held as another kind of lock ("exclusive", "shared",
--                                      "limit N"); nothing was changed
--         {"wrongtype", type}          the key is not a lock; nothing was changed
-- A multi-holder lock (semaphore, shared) is multi.lua's sorted set.
-- Errors (nothing was changed): WRONGTYPE for a helper key of another type or a fence counter
-- that cannot be raised, NOPERM for a command the ACL user may not run.
local lock, state, queue = KEYS[1], KEYS[2], KEYS[3]
local token, ttl, join, check, channel = ARGV[1], tonumber(ARGV[2]), ARGV[3] == "1", tonumber(ARGV[4]), ARGV[5]
local now = now_ms()

local mode, limit = ARGV[10] or "", tonumber(ARGV[11]) or 0
local kind = redis.call("TYPE", lock)["ok"]
if kind ~= "none" and kind ~= "string" and kind ~= "zset" then
  return {"wrongtype", kind}
end
-- A sorted set is a lock only when rlock's state says which kind.
local held_mode = kind == "zset" and redis.call("TYPE", state)["ok"] == "hash" and
  redis.call("HGET", state, "mode")
if kind == "zset" and held_mode ~= "limit" and held_mode ~= "shared" then
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
if mode ~= "" or kind == "zset" then
  expect_rights({{"ZADD", lock, "1", token}, {"ZREMRANGEBYSCORE", lock, "0", "1"},
    {"DEL", lock}, {"HDEL", state, "h:"}})
end

-- The kind of lock held now, as a mismatch names it.
local function held_as()
  if kind == "string" then
    return "exclusive"
  elseif held_mode == "shared" then
    return "shared"
  end
  return "limit " .. (redis.call("HGET", state, "limit") or "?")
end

-- Keeps (or takes) a place in line. The waiter checks again within `horizon` ms, so the line
-- lives that long and a while more.
local function wait_in_line(horizon)
  if join then
    redis.call("ZADD", queue, "NX", mode == "shared" and now + 0.5 or now, token)
    keep_alive(queue, horizon + KEEP_MS)
  end
end

-- The holder whose lease ends first, for a busy reply; `ahead` when an exclusive waiter is
-- what keeps a shared request out.
local function busy_multi(pttl, ahead)
  local first = redis.call("ZRANGE", lock, 0, 0)[1]
  local ok, h = pcall(cjson.decode, redis.call("HGET", state, "h:" .. (first or "")) or "")
  if not ok or type(h) ~= "table" then
    h = {}
  end
  -- (false, not nil, for a field a damaged record lacks: a nil would end the reply there.)
  return {"busy", pttl, now, h.host or false, h.pid or false, h.user or false, h.since or false,
    h.cmd or false, redis.call("ZCARD", lock),
    tonumber(redis.call("HGET", state, "limit")) or 0, ahead and 1 or 0}
end

if kind == "zset" then
  -- Only holders whose lease runs decide the kind of the lock.
  local other_kind = (mode == "" and held_mode == "limit") or (mode ~= "" and (mode ~= held_mode or
      (mode == "limit" and tonumber(redis.call("HGET", state, "limit")) ~= limit)))
  if other_kind and redis.call("ZCOUNT", lock, "(" .. now, "+inf") > 0 then
    return {"mismatch", held_as()}
  end
  if drop_expired_holders(lock, state, now) == 0 then
    redis.call("DEL", lock)
    kind = "none"
  end
end

if mode ~= "" then
  if kind == "string" and mode == "limit" then
    return {"mismatch", held_as()}
  end
  if kind == "zset" then
    local mine = redis.call("ZSCORE", lock, token)
    if mine then
      -- Already ours: a retried acquire whose first reply was lost.
      redis.call("ZADD", lock, math.max(tonumber(mine), now + ttl), token)
      expire_with_last(lock, now)
      local ok, h = pcall(cjson.decode, redis.call("HGET", state, "h:" .. token) or "")
      return {"ok", ok and type(h) == "table" and tonumber(h.fence) or 0, ttl}
    end
  end
  if kind ~= "string" then
    local held = kind == "zset" and redis.call("ZCARD", lock) or 0
    drop_unclaimed(queue, state, now)
    local go, blocked = admissible(queue, state, now, mode == "shared", limit - held)
    local admitted = false
    for _, t in ipairs(go) do
      if t == token then
        admitted = true
      end
    end
    if not redis.call("ZSCORE", queue, token) then
      -- A newcomer goes only when nobody waits who may not go, and, for a semaphore, a slot
      -- is left over by those who may.
      admitted = blocked == nil and (mode == "shared" or #go < limit - held)
    end
    if admitted then
      fence = math.max(fence + 1, now_us)
      if kind == "none" then
        -- Records of holders of an earlier life of the key.
        for _, f in ipairs(redis.call("HKEYS", state)) do
          if string.sub(f, 1, 2) == "h:" then
            redis.call("HDEL", state, f)
          end
        end
      end
      redis.call("ZADD", lock, now + ttl, token)
      expire_with_last(lock, now)
      -- (cjson writes numbers with 14 digits: the fence goes as a string.)
      redis.call("HSET", state, "fence", fence, "mode", mode, "limit", limit, "h:" .. token,
        cjson.encode({fence = string.format("%.0f", fence), host = ARGV[6], pid = ARGV[7], user = ARGV[8],
          cmd = ARGV[9], since = now, ttl = ttl, renewed = now, pidns = ARGV[12] or ""}))
      redis.call("HDEL", state, "go:" .. token)
      if redis.call("HGET", state, "next") == token then
        redis.call("HDEL", state, "next", "next_until")
      end
      redis.call("ZREM", queue, token)
      keep_alive(state, ttl + KEEP_MS)
      -- Whoever else may now come in (the readers behind this one, say) is told so.
      go, blocked = admissible(queue, state, now, mode == "shared", limit - held - 1)
      wake_admissible(state, channel, now, go, blocked)
      return {"ok", fence, ttl}
    end
    -- It was here and is alive: a window it had to claim is moot.
    redis.call("HDEL", state, "go:" .. token)
    wake_admissible(state, channel, now, go, blocked)
    if held > 0 and (mode == "shared" or held >= limit) then
      local pttl = mode == "shared" and redis.call("PTTL", lock) or first_end(lock, now)
      wait_in_line(pttl)
      return busy_multi(pttl, mode == "shared" and blocked ~= nil)
    end
    local r = redis.call("HMGET", state, "next", "next_until")
    local wait = CLAIM_MS
    if r[1] and r[1] ~= token and (tonumber(r[2]) or 0) > now then
      wait = tonumber(r[2]) - now
    end
    wait_in_line(wait)
    return {"queued", wait, now}
  end
  -- A shared request waits for an exclusive holder like any other request (below).
end

if kind == "zset" then
  -- Shared holders: an exclusive request waits until every one is gone.
  local pttl = redis.call("PTTL", lock)
  wait_in_line(pttl)
  return busy_multi(pttl)
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
-- So does a waiter told of a free slot of a semaphore or shared lock that since went.
while true do
  local first = redis.call("ZRANGE", queue, 0, 0)[1]
  local until_go = first and tonumber(redis.call("HGET", state, "go:" .. first))
  if not until_go or until_go > now then
    break
  end
  redis.call("ZREM", queue, first)
  redis.call("HDEL", state, "go:" .. first)
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
  "user", ARGV[8], "cmd", ARGV[9], "since", now, "ttl", ttl, "renewed", now, "pidns", ARGV[12] or "")
redis.call("HDEL", state, "released", "broken", "next", "next_until")
redis.call("ZREM", queue, token)
keep_alive(state, ttl + KEEP_MS)
return {"ok", fence, ttl}
