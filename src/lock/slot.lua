-- slot: acquire's part for a lock with several holders (multi.lua's semaphore or shared lock),
-- prepended after common.lua and multi.lua to acquire.lua only (see build.rs): the give-back
-- script (leave), sent whole, stays small.

-- Keeps (or takes) a place in line for acquire's request `r`, when it asked to wait. The waiter
-- checks again within `horizon` ms, so the line lives that long and a while more. A shared
-- waiter's score is its arrival time + 0.5 (multi.lua's is_reader). Who waits (host, pid,
-- user, cmd: the holder record it would get) is kept in the state as "w:<token>", JSON, for
-- inspect; whatever takes a waiter out of the line deletes it (common.lua's leave_line).
local function wait_in_line(r, horizon)
  if r.join then
    local joined = redis.call("ZADD", r.queue, "NX", r.mode == "shared" and r.now + 0.5 or r.now,
      r.token)
    keep_alive(r.queue, horizon + KEEP_MS)
    if joined == 1 or redis.call("HEXISTS", r.state, "w:" .. r.token) == 0 then
      -- newest: the waiter asked for --newest ("1", or "2" with --cancel-running), and a newer
      -- waiter that asked for it too displaces it (supersede, below).
      redis.call("HSET", r.state, "w:" .. r.token, cjson.encode({host = r.who.host,
        pid = r.who.pid, user = r.who.user, cmd = r.who.cmd, newest = r.newest}))
    end
    keep_alive(r.state, horizon + KEEP_MS)
  end
end

-- The waiter's place in line (1 for the first), for its -v lines; nil when it does not wait in
-- line. Waiters that arrived in the same millisecond share a place.
local function place_in_line(r)
  local score = r.join and redis.call("ZSCORE", r.queue, r.token)
  if not score then
    return nil
  end
  return redis.call("ZCOUNT", r.queue, "-inf", "(" .. score) + 1
end

-- acquire's busy reply for a multi-holder lock: the holder whose lease ends first, how many
-- hold it and the limit (0 for a shared lock); `ahead` when an exclusive waiter is what keeps a
-- shared request out.
local function busy_multi(r, pttl, ahead)
  local first = redis.call("ZRANGE", r.lock, 0, 0)[1]
  local h = record_of(r.state, first or "") or {}
  -- The record is JSON, whose numbers Lua 5.4 decodes as floats: "since" goes back an integer.
  return reply("busy", "pttl", pttl, "now", r.now, "host", h.host, "pid", h.pid, "user", h.user,
    "since", h.since and math.floor(h.since), "cmd", h.cmd, "ttl", h.ttl, "holders", redis.call("ZCARD", r.lock),
    "limit", tonumber(redis.call("HGET", r.state, "limit")) or 0, "ahead", ahead and 1,
    "place", place_in_line(r))
end

-- acquire for a semaphore or shared lock (`r.mode`), on a key that is absent (`kind` "none") or
-- already such a lock of the same kind ("zset", its expired holders dropped): every check is
-- made. Returns acquire's reply: the grant, busy, or queued behind an earlier waiter.
local function take_slot(r, kind)
  local lock, state, queue, token, now = r.lock, r.state, r.queue, r.token, r.now
  if kind == "zset" then
    local mine = redis.call("ZSCORE", lock, token)
    if mine then
      -- Already ours: a retried acquire whose first reply was lost.
      redis.call("ZADD", lock, math.max(tonumber(mine), now + r.ttl), token)
      expire_with_last(lock, now)
      local h = record_of(state, token)
      local fence = h and tonumber(h.fence) or 0
      if h then
        local changed = false
        -- The key granted to others since that first grant: the fence this try is told rises
        -- over theirs, as every grant's does (found by the simulation, tests/sim).
        if fence < r.fence then
          fence = math.max(r.fence + 1, r.now_us)
          h.fence = string.format("%.0f", fence)
          redis.call("HSET", state, "fence", fence)
          changed = true
        end
        -- A give-back sent after an earlier try must not undo what this one confirms.
        if (tonumber(h.try) or 0) < r.try then
          h.try = r.try
          changed = true
        end
        if changed then
          redis.call("HSET", state, "h:" .. token, cjson.encode(h))
        end
      end
      return reply("ok", "fence", fence, "ttl", r.ttl)
    end
  end
  local shared, held = r.mode == "shared", kind == "zset" and redis.call("ZCARD", lock) or 0
  drop_unclaimed(queue, state, now)
  local go, blocked = admissible(queue, state, now, shared, r.limit - held)
  local admitted = false
  for _, t in ipairs(go) do
    if t == token then
      admitted = true
    end
  end
  if not redis.call("ZSCORE", queue, token) then
    -- A newcomer goes only when nobody waits who may not go, and, for a semaphore, a slot
    -- is left over by those who may.
    admitted = blocked == nil and (shared or #go < r.limit - held)
  end
  if admitted then
    local fence = math.max(r.fence + 1, r.now_us)
    if kind == "none" then
      -- Records of holders of an earlier life of the key.
      for _, f in ipairs(redis.call("HKEYS", state)) do
        if string.sub(f, 1, 2) == "h:" then
          redis.call("HDEL", state, f)
        end
      end
    end
    -- The record before the slot: a server older than Redis 4.0 refuses an HSET of several
    -- fields, and then no slot is held. (cjson writes numbers with 14 digits: the fence goes as
    -- a string.)
    local record = holder_fields(r.who, string.format("%.0f", fence), now, r.ttl)
    record.try = r.try
    redis.call("HSET", state, "fence", fence, "mode", r.mode, "limit", r.limit, "h:" .. token,
      cjson.encode(record))
    redis.call("ZADD", lock, now + r.ttl, token)
    expire_with_last(lock, now)
    redis.call("HDEL", state, "go:" .. token)
    if redis.call("HGET", state, "next") == token then
      redis.call("HDEL", state, "next", "next_until")
    end
    leave_line(queue, state, token)
    keep_alive(state, r.ttl + KEEP_MS)
    -- Whoever else may now come in (the readers behind this one, say) is told so.
    go, blocked = admissible(queue, state, now, shared, r.limit - held - 1)
    wake_admissible(queue, state, r.channel, now, go, blocked)
    return reply("ok", "fence", fence, "ttl", r.ttl)
  end
  -- It was here and is alive: a window it had to claim is moot.
  redis.call("HDEL", state, "go:" .. token)
  wake_admissible(queue, state, r.channel, now, go, blocked)
  if held > 0 and (shared or held >= r.limit) then
    local pttl = shared and redis.call("PTTL", lock) or first_end(lock, now)
    wait_in_line(r, pttl)
    return busy_multi(r, pttl, shared and blocked ~= nil)
  end
  local next_in_line = redis.call("HMGET", state, "next", "next_until")
  local wait = CLAIM_MS
  if next_in_line[1] and next_in_line[1] ~= token and (tonumber(next_in_line[2]) or 0) > now then
    wait = tonumber(next_in_line[2]) - now
  end
  wait_in_line(r, wait)
  return reply("queued", "wait", wait, "now", now)
end

-- --newest: request `r`, joining the line now, displaces every waiter in it that asked for
-- --newest too (all of them came before it), and with `running` (--cancel-running) the holder
-- `holder`, when its grant asked for --cancel-running. A displaced waiter leaves the line here;
-- its fate, who displaced it, is written as "x:<token>" in the state, and the message on its
-- own channel ("x") only wakes it: it reads its fate from here at its next try (acquire) or
-- renewal (renew.lua), so that a message anyone could publish decides nothing. A waiter nobody
-- listens for has gone: it leaves the line, and no fate is kept for it. A fate is kept KEEP_MS
-- (a late duplicate of a try must read it too), and dropped by the next displacement after.
local function supersede(r, running, holder)
  for _, f in ipairs(redis.call("HKEYS", r.state)) do
    if string.sub(f, 1, 2) == "x:" then
      local ok, old = pcall(cjson.decode, redis.call("HGET", r.state, f))
      if not ok or type(old) ~= "table" or (tonumber(old.at) or 0) + KEEP_MS < r.now then
        redis.call("HDEL", r.state, f)
      end
    end
  end
  local by = cjson.encode({host = r.who.host, pid = r.who.pid, user = r.who.user,
    cmd = r.who.cmd, at = r.now})
  for _, t in ipairs(redis.call("ZRANGE", r.queue, 0, -1)) do
    local ok, w = pcall(cjson.decode, redis.call("HGET", r.state, "w:" .. t) or "")
    if t ~= r.token and ok and type(w) == "table" and w.newest then
      leave_line(r.queue, r.state, t)
      redis.call("HDEL", r.state, "go:" .. t)
      if redis.call("HGET", r.state, "next") == t then
        redis.call("HDEL", r.state, "next", "next_until")
      end
      if redis.call("PUBLISH", r.channel .. ":" .. t, "x") > 0 then
        redis.call("HSET", r.state, "x:" .. t, by)
      end
    end
  end
  if running and holder and holder ~= r.token and
      redis.call("HGET", r.state, "cancel") == holder and
      redis.call("HGET", r.state, "token") == holder and
      redis.call("HEXISTS", r.state, "x:" .. holder) == 0 then
    redis.call("HSET", r.state, "x:" .. holder, by)
    redis.call("PUBLISH", r.channel .. ":" .. holder, "x")
  end
end
