-- common: prepended to the scripts that need it (see build.rs); Redis sees one script.
--
-- Every check a script makes comes before its first write. Redis keeps what a script wrote
-- before it failed, so a script that stops halfway would leave, say, a grant nobody received.
if redis.replicate_commands then pcall(redis.replicate_commands) end

-- Lua 5.2 and later (Dragonfly and Garnet run scripts on 5.4) have table.unpack, and may not
-- have the global unpack (which Redis 7 would refuse to read when it is missing): that first.
local unpack = table.unpack or unpack

-- The type of `key` as a word ("none", "string", "hash", ...). Redis gives TYPE's status reply
-- to Lua as a table {ok = word}; a host may give the plain word.
local function type_of(key)
  local t = redis.call("TYPE", key)
  if type(t) == "table" then
    return t.ok
  end
  return t
end

-- Stops the script with the error `msg`, "CODE words", nothing written. Redis 7 and Valkey take
-- the error as a table and keep its code; Redis 6 can only put its position before a string
-- ("@user_script:N: CODE words", which backend/error.rs reads past).
local function raise(msg)
  if redis.REDIS_VERSION then
    error({err = msg})
  end
  error(msg, 0)
end

-- Fields by name: the (name, value) pairs given, flat, leaving out those whose value is nil or
-- false. Replies are read by name (src/lock/reply.rs), never by position, so a field a reply
-- lacks is simply absent; and a nil inside a list would end the list Redis sends.
local function named(...)
  local out = {}
  for i = 1, select("#", ...), 2 do
    local name, value = select(i, ...)
    if value ~= nil and value ~= false then
      out[#out + 1] = name
      out[#out + 1] = value
    end
  end
  return out
end

-- A script's reply: a word saying what happened, then fields by name (see `named`).
local function reply(outcome, ...)
  local out = named(...)
  table.insert(out, 1, outcome)
  return out
end

-- The script's arguments by name. ARGV is flat, name then value (`name1, value1, name2, value2,
-- ...`, src/lock/call.rs), read once into a table here: a script never finds an argument by its
-- position, so that an argument added later cannot shift the others.
local function args()
  local a = {}
  for i = 1, #ARGV, 2 do
    a[ARGV[i]] = ARGV[i + 1]
  end
  return a
end

-- How long a lock's helper keys outlive its last lease: every key rlock writes expires, at most
-- this long after the lock has neither holder nor waiter.
local KEEP_MS = 60000

-- The server's clock in milliseconds, and in microseconds (the fence's floor): one clock for
-- every rlock, whatever the hosts' clocks say.
local function now_ms()
  local t = redis.call("TIME")
  local s, us = tonumber(t[1]), tonumber(t[2])
  return s * 1000 + math.floor(us / 1000), s * 1000000 + us
end

-- Lets `key` live at least `ms` longer, never shortening a longer life; a key with no TTL gets
-- one. Nothing happens to a key that does not exist.
local function keep_alive(key, ms)
  local left = redis.call("PTTL", key)
  if left == -1 or (left >= 0 and left < ms) then
    redis.call("PEXPIRE", key, ms)
  end
end

-- What a grant with the default --ttl (30 s) leaves behind once released: its state, for
-- KEEP_MS after its lease. After a release nothing rlock keeps for the key lives longer, whatever
-- TTL earlier grants or renewals asked for (`renew --ttl 365d` made the state live a year).
local AFTER_RELEASE_MS = 30000 + KEEP_MS

-- Lets `key` live at most `ms` longer, never lengthening a shorter life; a key with no TTL gets
-- one. Nothing happens to a key that does not exist.
local function keep_at_most(key, ms)
  local left = redis.call("PTTL", key)
  if left == -1 or left > ms then
    redis.call("PEXPIRE", key, ms)
  end
end

-- Stops the script (WRONGTYPE, nothing written) unless rlock's helper key `key` is absent or a
-- `want`.
local function expect_type(key, want, what)
  local kind = type_of(key)
  if kind ~= "none" and kind ~= want then
    raise("WRONGTYPE rlock's " .. what .. " key '" .. key .. "' holds a " .. kind ..
      ", not a " .. want)
  end
end

-- Stops the script (NOPERM, nothing written) unless the ACL user may run every command of
-- `commands` (each a list of arguments). Servers before 7.0 cannot tell in advance: there the
-- command itself is refused when it runs.
local function expect_rights(commands)
  if not redis.acl_check_cmd then
    return
  end
  for _, argv in ipairs(commands) do
    local ok, allowed = pcall(redis.acl_check_cmd, unpack(argv))
    if ok and not allowed then
      raise("NOPERM this user has no permissions to run the '" .. string.lower(argv[1]) ..
        "' command on '" .. argv[2] .. "'")
    end
  end
end

-- The fencing counter in `state` (a hash or nothing), checked before anything is written: a
-- value that is not a whole number below 2^53 (safe as a JSON number) cannot be raised.
local function fence_of(state)
  local f = redis.call("HGET", state, "fence")
  if not f then
    return 0
  end
  if not string.match(f, "^%d+$") or #f > 16 or tonumber(f) >= 9007199254740991 then
    raise("WRONGTYPE rlock's fence counter in '" .. state .. "' is '" ..
      string.sub(f, 1, 40) .. "', not a whole number below 2^53")
  end
  return tonumber(f)
end

-- The kind of multi-holder lock (multi.lua: "limit" or "shared") at a lock key of type `kind`,
-- or nil when it is none: a sorted set is such a lock only when rlock's state says which kind.
local function multi_mode(kind, state)
  if kind ~= "zset" or type_of(state) ~= "hash" then
    return nil
  end
  local mode = redis.call("HGET", state, "mode")
  if mode == "limit" or mode == "shared" then
    return mode
  end
  return nil
end

-- Whether `lock` is a lock, asked one way by every script: its Redis type, the kind of
-- multi-holder lock it is (multi_mode, or nil), and true when it is free or a lock (a string,
-- rlock's or another client's, or a sorted set that rlock's state calls a lock).
local function lock_kind(lock, state)
  local kind = type_of(lock)
  local mode = multi_mode(kind, state)
  return kind, mode, kind == "none" or kind == "string" or mode ~= nil
end

-- The fields of the holder record of a lock with one holder, kept in its state hash beside
-- "token" (and, as JSON, of each holder of a multi-holder lock, multi.lua's "h:<token>"): the
-- list is spelled here only.
local HOLDER_FIELDS = {"fence", "host", "pid", "user", "cmd", "since", "ttl", "renewed", "pidns"}

-- The holder record of a grant to `who` (host, pid, user, cmd, pidns) with `fence`, at `now`,
-- for `ttl` ms, by name.
local function holder_fields(who, fence, now, ttl)
  return {fence = fence, host = who.host, pid = who.pid, user = who.user, cmd = who.cmd,
    since = now, ttl = ttl, renewed = now, pidns = who.pidns}
end

-- `record` (holder_fields') flat for HSET, "token" first: name, value, ...
local function holder_hset(token, record)
  local out = {"token", token}
  for _, name in ipairs(HOLDER_FIELDS) do
    out[#out + 1] = name
    out[#out + 1] = record[name]
  end
  return out
end

-- The holder record in `state` by name, when it is `token`'s; nil when there is none (no state,
-- a state of another type, a record of another token). A field the record lacks is nil.
local function holder_of(state, token)
  if not token or type_of(state) ~= "hash" then
    return nil
  end
  local v = redis.call("HMGET", state, "token", unpack(HOLDER_FIELDS))
  if v[1] ~= token then
    return nil
  end
  local h = {}
  for i, name in ipairs(HOLDER_FIELDS) do
    h[name] = v[i + 1] or nil
  end
  return h
end

-- The record of holder `token` of a multi-holder lock (multi.lua's JSON) as a table, or nil when
-- there is none or it cannot be read.
local function record_of(state, token)
  local ok, h = pcall(cjson.decode, redis.call("HGET", state, "h:" .. token) or "")
  if ok and type(h) == "table" then
    return h
  end
  return nil
end

-- Takes waiter `token` out of the line `queue`, with what the state keeps of it (slot.lua's
-- wait_in_line: who it is).
local function leave_line(queue, state, token)
  redis.call("ZREM", queue, token)
  redis.call("HDEL", state, "w:" .. token)
end

-- How long the first waiter in line has to claim a lock handed to it. A waiter that died (SIGKILL)
-- after its wake-up was sent keeps its turn this long, once; then the next in line goes.
local CLAIM_MS = 1000

-- Sends `message` to the first waiter in `queue` from place `from` (0 first) that hears it, and
-- returns that waiter's token (nil when none does). A waiter in line listens on its own channel
-- all the time it waits (it takes its place only once subscribed), so one that nobody listens
-- for has died or given up without a word: it leaves the line here, and leaves no hole in it.
local function tell_first_alive(queue, state, channel, from, message)
  while true do
    local t = redis.call("ZRANGE", queue, from, from)[1]
    if not t or redis.call("PUBLISH", channel .. ":" .. t, message) > 0 then
      return t
    end
    leave_line(queue, state, t)
    redis.call("HDEL", state, "go:" .. t)
  end
end

-- Hands a free lock to the first waiter in line: reserves it for that waiter for CLAIM_MS and
-- wakes it on its own channel ("go"), and tells the waiter behind it when the reservation ends
-- (the milliseconds left), so that someone is awake to move on should the first never claim
-- it. A handoff thus wakes one waiter and warns another, however long the line; waiters that
-- nobody listens for are dropped on the way (tell_first_alive). With nobody in line it wakes
-- anyone on the shared channel ("*"): waiters that do not queue (Redlock).
local function hand_off(queue, state, channel, now)
  local first = tell_first_alive(queue, state, channel, 0, "go")
  if not first then
    redis.call("HDEL", state, "next", "next_until")
    redis.call("PUBLISH", channel, "*")
    return
  end
  redis.call("HSET", state, "next", first, "next_until", now + CLAIM_MS)
  keep_alive(state, CLAIM_MS + KEEP_MS)
  tell_first_alive(queue, state, channel, 1, tostring(CLAIM_MS))
end
