-- release: delete the lock if the token owns it (compare-and-delete), or whoever owns it when
-- forced; then hand it to the first waiter in line (or wake anyone: "*", when nobody waits).
-- KEYS[1] lock  KEYS[2] state  KEYS[3] queue: the lock's own keys only. The history is never
--   among them: an ACL that refuses it (command, key or channel) must not refuse the release.
-- ARGV by name (common.lua's args): token; channel (the wake channel); force ("1" to force);
--   and, to say what the history should keep of the hold as it ends: record ("1"), run (the
--   run's ID), by (who forces, "user@host pid N"); and entry (optional): `rlock exec`'s run as
--   it ends should this release give the lock back, a JSON list of name then value
--   (src/lock/history.rs), said in place of the hold; nothing is said when the token no longer
--   owns the lock (exec then records the run as lost itself)
-- A lock granted with a hold (acquire.lua's "hold_until") released before that time is left to
-- expire then, by this server's clock, rather than deleted: nobody else gets it sooner, and
-- nobody is woken now (waiters sleep until the lock's expiry). A forced break deletes it.
-- Returns a word, then fields by name (common.lua's reply; a field without a value is left out):
--   "released"                    the token owned it; it is gone (or held until "until", server
--                                 ms, --hold-at-least)
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
-- With record, a reply may also carry "history": the entries the history should get (a JSON
-- list of entries, each a list of name then value), which rlock appends with record.lua, a
-- script of its own; and "unrecorded": why a hold that ended cannot be on record.
-- Errors (nothing was changed): WRONGTYPE for a helper key of another type, NOPERM for a command
-- the ACL user may not run.
local lock, state, queue = KEYS[1], KEYS[2], KEYS[3]
local a = args()
local token, channel, force = a.token or "", a.channel, a.force == "1"
local now = now_ms()

-- What the history should keep of the holds this release ends (record.lua writes it).
local recording = a.record == "1"
local unrecorded = nil
local entries = {}
-- A hold that ends before its --hold-at-least: when the lock is free again (server ms).
local held_until = nil
local run_fields = nil
if recording and a.entry then
  run_fields = cjson.decode(a.entry)
end

-- A whole number as Redis should keep it (never 1.79e+15), or nil.
local function whole(x)
  local n = tonumber(x)
  if not n then
    return nil
  end
  return string.format("%.0f", n)
end

-- A field of a holder record as text, or nil when it is not a string or a number (a record
-- another client wrote): the history is never handed what XADD would refuse.
local function text(x)
  if type(x) == "string" then
    return x
  end
  if type(x) == "number" then
    return whole(x)
  end
  return nil
end

-- Says what the history should keep of the hold of holder `h` (the holder record: since, host,
-- pid, user, cmd, fence), ended at `ended` (server ms) as `outcome`, as record.lua appends an
-- exec's run; `run` tells the entries of several holders apart.
local function record_hold(h, outcome, ended, run)
  local since = tonumber(h.since)
  if run_fields and outcome ~= "released" then
    return
  end
  if not recording or not (since or run_fields) then
    return
  end
  local fields = run_fields or named("run", run or a.run, "granted_ms", whole(since),
    "ended_ms", whole(ended), "held_ms", whole(math.max(0, ended - since)), "host", text(h.host),
    "user", text(h.user), "pid", text(h.pid), "command", text(h.cmd), "fence", whole(h.fence),
    "outcome", outcome, "by", outcome == "broken" and a.by or nil)
  if held_until then
    fields[#fields + 1] = "held_until_ms"
    fields[#fields + 1] = whole(held_until)
  end
  entries[#entries + 1] = fields
end

-- The entries said so far, for the reply's "history" field (nil when there are none).
local function history()
  if entries[1] then
    return cjson.encode(entries)
  end
  return nil
end

-- Checks (common.lua), all before the first write.
local kind, multi, is_lock = lock_kind(lock, state)
if not is_lock and not (force and kind == "hash") then
  return reply("wrongtype", "type", kind)
end
expect_type(state, "hash", "state")
expect_type(queue, "zset", "queue")
expect_rights({{"DEL", lock}, {"PEXPIRE", lock, "1"}, {"HSET", state, "released", "1"},
  {"HDEL", state, "released"}, {"PEXPIRE", state, "1"}, {"ZREM", queue, token}, {"PUBLISH", channel, "*"}})

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
    for _, h in ipairs(recording and holders or {}) do
      local ok, rec = pcall(cjson.decode, h.record or "")
      if ok and type(rec) == "table" then
        -- One entry per holder, the same on every Redlock master (and no token in it).
        record_hold(rec, "broken", now, a.run .. "/" .. string.sub(redis.sha1hex(h.token), 1, 8))
      end
    end
    return reply("brokenall", "now", now, "holders", holders_field(holders),
      "history", history(), "unrecorded", unrecorded)
  end
  local ends = tonumber(redis.call("ZSCORE", lock, token))
  if ends then
    local h = recording and record_of(state, token)
    redis.call("ZREM", lock, token)
    redis.call("HDEL", state, "h:" .. token)
    if ends > now then
      redis.call("HSET", state, "left", token)
      after_leaving(lock, state, queue, channel, now)
      shorten_state(lock, state, now)
      if h or run_fields then
        record_hold(h or {}, "released", now)
      end
      return reply("released", "history", history(), "unrecorded", unrecorded)
    end
    after_leaving(lock, state, queue, channel, now)
    shorten_state(lock, state, now)
    -- Its lease ran out before the release, and nobody has dropped it yet: lost.
    if h then
      record_hold(h, "lost", ends)
    end
  elseif redis.call("HGET", state, "left") == token then
    return reply("already")
  end
  return reply("expired", "history", history(), "unrecorded", unrecorded)
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
  local h = value and holder_of(state, value)
  redis.call("DEL", lock)
  if h then
    -- Broken, not released: the owner's own release must still hear that it lost the lock.
    redis.call("HDEL", state, "released")
    redis.call("HSET", state, "broken", now)
  end
  hand_off(queue, state, channel, now)
  keep_at_most(state, AFTER_RELEASE_MS)
  if h then
    record_hold(h, "broken", now)
  end
  h = h or {}
  return reply("broken", "type", kind, "pttl", pttl, "value", value, "host", h.host, "pid", h.pid,
    "user", h.user, "since", h.since, "cmd", h.cmd, "now", now, "history", history(),
    "unrecorded", unrecorded)
end

local current = redis.call("GET", lock)
if current == token then
  local h = recording and holder_of(state, token)
  local kept = redis.call("HMGET", state, "token", "hold_until")
  local hold_until = kept[1] == token and tonumber(kept[2])
  if hold_until and hold_until > now then
    if redis.call("HEXISTS", state, "released") == 1 then
      return reply("already")
    end
    redis.call("PEXPIRE", lock, hold_until - now)
    redis.call("HSET", state, "released", now)
    keep_alive(state, hold_until - now + KEEP_MS)
    held_until = hold_until
  else
    hold_until = nil
    redis.call("DEL", lock)
    redis.call("HSET", state, "released", now)
    hand_off(queue, state, channel, now)
    keep_at_most(state, AFTER_RELEASE_MS)
  end
  if h or run_fields then
    record_hold(h or {}, "released", now)
  end
  return reply("released", "until", hold_until, "history", history(), "unrecorded", unrecorded)
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
-- The token's lease ran out before this release. While the state still has its record (nobody
-- took the lock since, and for 60 s after the lease), the hold is recorded as lost, once ("lost"
-- names the token whose loss is on record), ending when the lease did as far as the state says
-- (its last renewal and TTL). A forced break was recorded by the break.
-- A holder of a semaphore or shared lock whose lease ran out with the key (the last lease): its
-- record is left, until the state expires; recorded once, as the record goes.
-- Not for `rlock exec`'s run (entry): exec records a run lost at its release itself.
if recording and not run_fields then
  local h = holder_of(state, token)
  local s = h and redis.call("HMGET", state, "broken", "lost")
  local multi_holder = kind == "none" and record_of(state, token)
  if h and not s[1] and s[2] ~= token then
    local marked = redis.pcall("HSET", state, "lost", token)
    if type(marked) == "table" and marked.err then
      unrecorded = marked.err
    else
      local ends = (tonumber(h.renewed) or tonumber(h.since) or now) + (tonumber(h.ttl) or 0)
      record_hold(h, "lost", math.min(now, ends))
    end
  elseif multi_holder then
    local dropped = redis.pcall("HDEL", state, "h:" .. token)
    if type(dropped) == "table" and dropped.err then
      unrecorded = dropped.err
    else
      h = multi_holder
      local ends = (tonumber(h.renewed) or tonumber(h.since) or now) + (tonumber(h.ttl) or 0)
      record_hold(h, "lost", math.min(now, ends))
    end
  end
end
return reply("expired", "history", history(), "unrecorded", unrecorded)
