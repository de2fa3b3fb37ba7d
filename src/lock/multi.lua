-- multi: locks with several holders, a semaphore (--limit N) or a shared lock (--shared);
-- prepended after common.lua to the scripts that need it (see build.rs).
--
-- Such a lock is a sorted set at the lock key: each holder's token, scored by the server time
-- (ms) its lease ends; the key itself expires with the last lease. The state hash says which
-- kind it is ("mode": "limit" with "limit": N, or "shared"), keeps the fence (raised by every
-- grant of the key, whatever its kind) and one record per holder, field "h:<token>" (JSON:
-- fence, host, pid, user, cmd, since, ttl, renewed). A waiter told that a slot is free ("go")
-- has until field "go:<token>" (server ms) to claim it, or loses its place in line.
--
-- The line (the queue) is shared with exclusive waiters: a shared waiter's score is its arrival
-- time + 0.5, an exclusive or semaphore waiter's a whole number of ms.

local function is_reader(score)
  return score % 1 ~= 0
end

-- Drops the holders whose lease has ended; returns how many remain.
local function drop_expired_holders(lock, state, now)
  local gone = redis.call("ZRANGEBYSCORE", lock, "-inf", now)
  if gone[1] then
    for _, t in ipairs(gone) do
      redis.call("HDEL", state, "h:" .. t)
    end
    redis.call("ZREMRANGEBYSCORE", lock, "-inf", now)
  end
  return redis.call("ZCARD", lock)
end

-- Lets the key live exactly as long as its last lease.
local function expire_with_last(lock, now)
  local last = redis.call("ZRANGE", lock, -1, -1, "WITHSCORES")
  if last[2] then
    redis.call("PEXPIRE", lock, math.max(1, math.ceil(tonumber(last[2]) - now)))
  end
end

-- After a holder left or was broken: the state lives as long as a default grant leaves it
-- (AFTER_RELEASE_MS), or as long as the last remaining lease needs its record, if longer.
local function shorten_state(lock, state, now)
  local last = redis.call("ZRANGE", lock, -1, -1, "WITHSCORES")
  local need = AFTER_RELEASE_MS
  if last[2] then
    need = math.max(need, math.ceil(tonumber(last[2]) - now) + KEEP_MS)
  end
  keep_at_most(state, need)
end

-- When the first lease of the lock ends, in ms from now (-2 when nobody holds it).
local function first_end(lock, now)
  local first = redis.call("ZRANGE", lock, 0, 0, "WITHSCORES")
  if not first[2] then
    return -2
  end
  return math.max(0, math.ceil(tonumber(first[2]) - now))
end

-- A waiter handed a free lock (common.lua's "next") or told of a free slot ("go:") that did not
-- claim it in time loses its place in line.
local function drop_unclaimed(queue, state, now)
  local r = redis.call("HMGET", state, "next", "next_until")
  if r[1] and (tonumber(r[2]) or 0) <= now then
    leave_line(queue, state, r[1])
    redis.call("HDEL", state, "next", "next_until")
  end
end

-- Walks the line, oldest first, and returns the waiters that may take the lock now: for a
-- semaphore the first `free` of them, for a shared lock the readers ahead of the first exclusive
-- waiter; and the first waiter that may not. Waiters told to claim a slot who let their time
-- run out are dropped from the line on the way.
local function admissible(queue, state, now, shared, free)
  local line = redis.call("ZRANGE", queue, 0, -1, "WITHSCORES")
  local go = {}
  local i = 1
  while line[i] do
    local t, score = line[i], tonumber(line[i + 1])
    local until_ms = tonumber(redis.call("HGET", state, "go:" .. t))
    if until_ms and until_ms <= now then
      leave_line(queue, state, t)
      redis.call("HDEL", state, "go:" .. t)
    elseif (shared and is_reader(score)) or (not shared and #go < free) then
      go[#go + 1] = t
    else
      return go, t
    end
    i = i + 2
  end
  return go, nil
end

-- Tells the admissible waiters not yet told that they may go (each on its own channel, with
-- CLAIM_MS to claim), and the first waiter that may not when their time ends, so that someone
-- is awake to move on should they never claim. A waiter nobody listens for (dead, or gone without
-- a word: common.lua's tell_first_alive) leaves the line instead, and when only such waiters
-- were told, the first that may not go is told at once ("0"): it comes in in their place.
local function wake_admissible(queue, state, channel, now, go, blocked)
  local told, heard = false, false
  for _, t in ipairs(go) do
    if not redis.call("HGET", state, "go:" .. t) then
      told = true
      if redis.call("PUBLISH", channel .. ":" .. t, "go") > 0 then
        redis.call("HSET", state, "go:" .. t, now + CLAIM_MS)
        heard = true
      else
        leave_line(queue, state, t)
      end
    end
  end
  if told then
    keep_alive(state, CLAIM_MS + KEEP_MS)
    if blocked then
      redis.call("PUBLISH", channel .. ":" .. blocked, heard and tostring(CLAIM_MS) or "0")
    end
  end
end

-- After a holder of a multi-holder lock left: wakes whoever may now take it.
local function after_leaving(lock, state, queue, channel, now)
  if redis.call("ZCARD", lock) == 0 then
    redis.call("DEL", lock)
    hand_off(queue, state, channel, now)
    return
  end
  expire_with_last(lock, now)
  drop_unclaimed(queue, state, now)
  local shared = redis.call("HGET", state, "mode") == "shared"
  local limit = tonumber(redis.call("HGET", state, "limit")) or 0
  local go, blocked = admissible(queue, state, now, shared, limit - redis.call("ZCARD", lock))
  wake_admissible(queue, state, channel, now, go, blocked)
end

-- The holders of a multi-holder lock, the first lease to end first: {token, ends (server ms),
-- record (its JSON, or false)} each.
local function holders_of(lock, state)
  local out = {}
  local all = redis.call("ZRANGE", lock, 0, -1, "WITHSCORES")
  for i = 1, #all, 2 do
    out[#out + 1] = {token = all[i], ends = math.floor(tonumber(all[i + 1])),
      record = redis.call("HGET", state, "h:" .. all[i]) or false}
  end
  return out
end

-- `holders` (holders_of's) as a reply's field: one list of fields (token, ends, record) each.
local function holders_field(holders)
  local out = {}
  for i, h in ipairs(holders) do
    out[i] = named("token", h.token, "ends", h.ends, "record", h.record)
  end
  return out
end
