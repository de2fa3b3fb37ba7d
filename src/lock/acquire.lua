-- acquire: grant the lock to a token if it is free and nobody is ahead of it in line; mint the
-- fencing token in the same step. Waiters keep their place without heartbeats: the line is
-- checked lazily, at handoff (common.lua's hand_off).
-- KEYS[1] lock (a string holding the owner token)  KEYS[2] state (hash: fence, holder, "try"
--         (the holder's latest try, see ARGV), and "next"/"next_until", the waiter a free lock
--         is reserved for)  KEYS[3] queue (zset of
--         waiting tokens, oldest first)
-- ARGV by name (common.lua's args): token; ttl (ms); join ("1" to join the queue when not
--         granted); check (ms until the waiter's next check, when the lock has no expiry);
--         channel (the wake channel); host, pid, user, cmd (the holder); mode ("" for an
--         exclusive lock, "limit" for a semaphore, "shared" for a shared lock); limit (the
--         semaphore's N); pidns (the holder's pid namespace, for inspect's stale check; may be
--         empty); try (the number of this try, rising with each try of the process that made the
--         token: a grant records the latest try that took or confirmed it, which leave.lua reads);
--         hold (optional, ms: --hold-at-least): the grant records "hold_until" (now + hold, by
--         this server's clock) in the state, and the lock lives at least that long, so that a
--         release before then leaves it to expire then (release.lua) and a holder that dies
--         does not free it sooner; newest (optional, exclusive locks only: --newest "1",
--         --cancel-running "2"): the request displaces the older waiters that asked for it too,
--         and with "2" a holder whose grant asked for "2" (slot.lua's supersede); a request so
--         displaced is answered "superseded" (below)
-- Returns a word, then fields by name (common.lua's reply; a field without a value is left out):
--   "ok" fence ttl                        granted: the fence, the lease (ms)
--   "busy" pttl now host pid user since cmd ttl [holders limit ahead] [place]
--                                         held: the holder fields only when rlock wrote them
--                                         (ttl: the lease (ms) its grant or last renewal asked
--                                         for, which Redlock's restart rule reads);
--                                         with several holders, the one whose lease ends first,
--                                         how many there are and the limit (0 for shared), and
--                                         ahead (1) when a shared request waits because an
--                                         exclusive one is ahead of it; place: the waiter's
--                                         place in line (1 first), when it waits in line
--   "queued" wait now                     the lock is free but an earlier waiter goes first
--   "mismatch" held [limit]               held as another kind of lock: held is "exclusive",
--                                         "shared" or "limit" (with the semaphore's limit);
--                                         nothing was changed
--   "wrongtype" type                      the key is not a lock; nothing was changed
--   "superseded" host pid user cmd        (newest) a newer run displaced this waiter: who it is;
--                                         the waiter is out of the line
-- A multi-holder lock (semaphore, shared) is multi.lua's sorted set; slot.lua's take_slot
-- grants it.
-- Errors (nothing was changed): WRONGTYPE for a helper key of another type or a fence counter
-- that cannot be raised, NOPERM for a command the ACL user may not run.
local lock, state, queue = KEYS[1], KEYS[2], KEYS[3]
local a = args()
local token, ttl, check, channel = a.token, tonumber(a.ttl), tonumber(a.check), a.channel
local now, now_us = now_ms()
local mode, limit = a.mode or "", tonumber(a.limit) or 0
local hold = tonumber(a.hold) or 0
-- The request, as slot.lua's wait_in_line and take_slot read it.
local r = {lock = lock, state = state, queue = queue, token = token, ttl = ttl, now = now,
  now_us = now_us, join = a.join == "1", channel = channel, mode = mode, limit = limit,
  try = tonumber(a.try) or 0, newest = a.newest,
  who = {host = a.host or "", pid = a.pid or "", user = a.user or "", cmd = a.cmd or "",
    pidns = a.pidns or ""}}

local kind, held_mode, is_lock = lock_kind(lock, state)
if not is_lock then
  return reply("wrongtype", "type", kind)
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

-- The kind of lock held now: the reply to a request of another kind.
local function mismatch()
  if kind == "string" then
    return reply("mismatch", "held", "exclusive")
  end
  return reply("mismatch", "held", held_mode,
    "limit", held_mode == "limit" and tonumber(redis.call("HGET", state, "limit")))
end

if kind == "zset" then
  -- Only holders whose lease runs decide the kind of the lock.
  local other_kind = (mode == "" and held_mode == "limit") or (mode ~= "" and (mode ~= held_mode or
      (mode == "limit" and tonumber(redis.call("HGET", state, "limit")) ~= limit)))
  if other_kind and redis.call("ZCOUNT", lock, "(" .. now, "+inf") > 0 then
    return mismatch()
  end
  if drop_expired_holders(lock, state, now) == 0 then
    redis.call("DEL", lock)
    kind = "none"
  end
end

if mode ~= "" then
  if kind == "string" and mode == "limit" then
    return mismatch()
  end
  if kind ~= "string" then
    r.fence = fence
    return take_slot(r, kind)
  end
  -- A shared request waits for an exclusive holder like any other request (below).
end

if r.newest then
  -- Displaced by a newer run (slot.lua's supersede): its fate, kept (a duplicate of this try,
  -- or a retry whose reply was lost, must not join the line again).
  local fate = redis.call("HGET", state, "x:" .. token)
  if fate then
    leave_line(queue, state, token)
    local ok, by = pcall(cjson.decode, fate)
    by = ok and type(by) == "table" and by or {}
    return reply("superseded", "host", by.host, "pid", by.pid, "user", by.user, "cmd", by.cmd)
  end
  if r.join and not redis.call("ZSCORE", queue, token) then
    supersede(r, r.newest == "2", kind == "string" and redis.call("GET", lock))
  end
end

if kind == "zset" then
  -- Shared holders: an exclusive request waits until every one is gone.
  local pttl = redis.call("PTTL", lock)
  wait_in_line(r, pttl)
  return busy_multi(r, pttl)
end

local current = redis.call("GET", lock)
if current == token then
  -- Already ours: a retried acquire whose first reply was lost, or a reentrant one. Its lease
  -- is made the TTL at least, never shorter: the grant's --hold-at-least stays.
  if redis.call("PTTL", lock) < ttl then
    redis.call("PEXPIRE", lock, ttl)
  end
  -- A give-back sent after an earlier try must not undo what this one confirms. (Before
  -- keep_alive: a state that had gone is made anew here, and must expire too.)
  if (tonumber(redis.call("HGET", state, "try")) or 0) < r.try then
    redis.call("HSET", state, "try", r.try)
  end
  keep_alive(state, ttl + KEEP_MS)
  if redis.call("HGET", state, "token") ~= token then
    -- The state was lost under the lock (evicted, deleted): its fence with it. The grant gets
    -- a fence minted anew, as a new grant's is (below): rlock believes no grant without one.
    fence = math.max(fence + 1, now_us)
    redis.call("HSET", state, unpack(holder_hset(token, holder_fields(r.who, fence, now, ttl))))
  end
  return reply("ok", "fence", fence, "ttl", ttl)
end

if current then
  local pttl = redis.call("PTTL", lock)
  wait_in_line(r, pttl >= 0 and pttl or check)
  local h = holder_of(state, current) or {}
  return reply("busy", "pttl", pttl, "now", now, "host", h.host, "pid", h.pid, "user", h.user,
    "since", h.since, "cmd", h.cmd, "ttl", h.ttl, "place", place_in_line(r))
end

-- Free. Reserved for another waiter whose claim window is open: wait for it.
local reserved = redis.call("HMGET", state, "next", "next_until")
local next_in_line, until_ms = reserved[1], tonumber(reserved[2]) or 0
if next_in_line and next_in_line ~= token then
  if until_ms > now then
    wait_in_line(r, until_ms - now)
    return reply("queued", "wait", until_ms - now, "now", now)
  end
  -- It did not claim the lock in time (it died, or missed its wake-up): it loses its turn.
  leave_line(queue, state, next_in_line)
end
-- So does a waiter told of a free slot of a semaphore or shared lock that since went.
while true do
  local first = redis.call("ZRANGE", queue, 0, 0)[1]
  local until_go = first and tonumber(redis.call("HGET", state, "go:" .. first))
  if not until_go or until_go > now then
    break
  end
  leave_line(queue, state, first)
  redis.call("HDEL", state, "go:" .. first)
end
-- Someone else is first in line: the lock is theirs (a holder that expired handed nothing),
-- unless the handoff finds nobody ahead of this request alive.
local head = redis.call("ZRANGE", queue, 0, 0)[1]
if head and head ~= token then
  hand_off(queue, state, channel, now)
  local handed = redis.call("HGET", state, "next")
  if handed and handed ~= token then
    wait_in_line(r, CLAIM_MS)
    return reply("queued", "wait", CLAIM_MS, "now", now)
  end
end

-- The fence rises with every grant, and also across a state that expired or was lost (FLUSHALL,
-- a restart without persistence, a failover that lost writes), as long as the server's clock
-- does not step back: it is at least the server's time in microseconds.
fence = math.max(fence + 1, now_us)
-- The record before the lock: a server older than Redis 4.0 refuses an HSET of several fields,
-- and then nothing is held.
local record = holder_hset(token, holder_fields(r.who, fence, now, ttl))
record[#record + 1] = "try"
record[#record + 1] = r.try
redis.call("HSET", state, unpack(record))
redis.call("SET", lock, token, "PX", math.max(ttl, hold))
-- Out of the line, with what it kept of this waiter (common.lua's leave_line, in one HDEL).
redis.call("HDEL", state, "released", "broken", "next", "next_until", "hold_until", "w:" .. token)
if hold > 0 then
  redis.call("HSET", state, "hold_until", now + hold)
end
if r.newest == "2" then
  -- --cancel-running: a newer run that asks for it too may stop this holder (supersede).
  redis.call("HSET", state, "cancel", token)
end
redis.call("ZREM", queue, token)
keep_alive(state, math.max(ttl, hold) + KEEP_MS)
return reply("ok", "fence", fence, "ttl", ttl)
