-- record: appends runs to a lock's history, a stream capped at a number of runs, which
-- expires a set time after the last run recorded (every key rlock writes expires).
--
-- KEYS[1]    the history, {K}:history (in the lock's cluster slot); KEYS[2] (with released_by
--            or granted_to) the lock's state, {K}:state; KEYS[3] (with granted_to) the lock, K
-- ARGV       by name, as common.lua's args reads them: keep_runs, how many runs to keep: exact
--            MAXLEN (an approximate `~` trims only whole stream nodes, 100 entries by default,
--            so a cap of 10 would keep 100); keep_ms, how long the history lives after this
--            run; entries, the runs' fields, a JSON list of entries, each a list of name then
--            value (src/lock/history.rs); released_by (optional), a token: append only if the
--            state says this token has just released the lock (sent with that release, in the
--            same round trip: exec's run is on record when its release gave the lock back);
--            a hold the release left to expire later (--hold-at-least) adds held_until_ms;
--            granted_to (optional), a token: append only if the lock is this token's now, the
--            entry given its grant's fence from the state (sent with each try at the lock, in
--            the same round trip: exec's run is on record from its grant, src/lock/running.rs);
--            running_id (optional), the stream ID of the run's entry of its grant, when that
--            write said it: the entry to replace is looked for there alone
--
-- Replies: {"recorded", "id", ID}; {"skipped"} when released_by's token did not release it, or
-- granted_to's does not hold the lock. Errors, nothing written: WRONGTYPE when the key holds
-- something other than a stream; NOPERM (asked first on Redis 7) when the user may not XADD or
-- PEXPIRE it.
--
-- A script of its own, never part of the lock's: an ACL that refuses the history (its key or its
-- commands) refuses this script alone. It runs at the end of every `exec` (and after a `release`
-- whose reply says what to record), without common.lua, whose definitions cost more than this
-- script's work. Its error helper is common.lua's `raise`, and its arguments are read as
-- common.lua's `args` reads them, in short.
if redis.replicate_commands then pcall(redis.replicate_commands) end
local function raise(msg)
  if redis.REDIS_VERSION then
    error({err = msg})
  end
  error(msg, 0)
end
-- As common.lua's: table.unpack on Lua 5.2 and later; TYPE's status reply, wrapped or not.
local unpack = table.unpack or unpack
local function type_of(key)
  local t = redis.call("TYPE", key)
  if type(t) == "table" then
    return t.ok
  end
  return t
end

local a = {}
for i = 1, #ARGV, 2 do
  a[ARGV[i]] = ARGV[i + 1]
end

local history = KEYS[1]
-- A hold the release left to expire later (--hold-at-least): when the lock is free (server ms).
local held_until = nil
if a.released_by then
  local state, token = KEYS[2], a.released_by
  local released = type_of(state) == "hash" and
    ((redis.call("HGET", state, "token") == token and redis.call("HEXISTS", state, "released") == 1)
      or redis.call("HGET", state, "left") == token)
  if not released then
    return {"skipped"}
  end
  local kept = redis.call("HMGET", state, "token", "hold_until", "released")
  if kept[1] == token and tonumber(kept[2]) and tonumber(kept[3]) and
      tonumber(kept[2]) > tonumber(kept[3]) then
    held_until = kept[2]
  end
end
-- The fence of the lock granted_to's token holds (one holder, or a slot of a multi-holder
-- lock: multi.lua's "h:<token>"); nil when it holds none.
local function granted_fence(lock, state, token)
  if type_of(state) ~= "hash" then
    return nil
  end
  local kind = type_of(lock)
  if kind == "string" and redis.call("GET", lock) == token and
      redis.call("HGET", state, "token") == token then
    return redis.call("HGET", state, "fence")
  end
  if kind == "zset" and redis.call("ZSCORE", lock, token) then
    local ok, h = pcall(cjson.decode, redis.call("HGET", state, "h:" .. token) or "")
    if ok and type(h) == "table" and h.fence then
      return tostring(h.fence)
    end
  end
  return nil
end
local grant_fence = nil
if a.granted_to then
  grant_fence = granted_fence(KEYS[3], KEYS[2], a.granted_to)
  if not grant_fence then
    return {"skipped"}
  end
end
local kind = type_of(history)
if kind ~= "none" and kind ~= "stream" then
  raise("WRONGTYPE rlock's history key '" .. history .. "' holds a " .. kind .. ", not a stream")
end
if redis.acl_check_cmd then
  for _, argv in ipairs({{"XADD", history, "MAXLEN", "1", "*", "f", "v"}, {"PEXPIRE", history, "1"}}) do
    local ok, allowed = pcall(redis.acl_check_cmd, unpack(argv))
    if ok and not allowed then
      raise("NOPERM this user has no permissions to run the '" .. string.lower(argv[1]) ..
        "' command on '" .. history .. "'")
    end
  end
end
-- A run's entry of its grant ("running", src/cmd/record.rs) gives way to the entry of how it
-- ended, found by its run ID or its grant's fence (a hold `release --force` broke is on record
-- under the release's run): at running_id when the run knows it, else the newest keep_runs
-- entries are looked through for it. Neither a refused read nor a refused XDEL stops the record
-- (pcall): the readers keep one entry per run.
local function drop_running(run, fence)
  local newest, oldest, count = "+", "-", a.keep_runs
  if a.running_id then
    newest, oldest, count = a.running_id, a.running_id, 1
  end
  local ok, recent = pcall(redis.call, "XREVRANGE", history, newest, oldest, "COUNT", count)
  if not ok or type(recent) ~= "table" then
    return
  end
  for _, e in ipairs(recent) do
    local f, mine, running = e[2], false, false
    for i = 1, #f, 2 do
      if (f[i] == "run" and f[i + 1] == run) or (f[i] == "fence" and fence and f[i + 1] == fence) then
        mine = true
      end
      if f[i] == "outcome" and f[i + 1] == "running" then running = true end
    end
    if mine and running then
      redis.pcall("XDEL", history, e[1])
    end
  end
end
local id = nil
for _, entry in ipairs(cjson.decode(a.entries)) do
  local run, outcome, fence = nil, nil, nil
  for i = 1, #entry, 2 do
    if entry[i] == "run" then run = entry[i + 1] end
    if entry[i] == "outcome" then outcome = entry[i + 1] end
    if entry[i] == "fence" then fence = entry[i + 1] end
  end
  if run and outcome ~= "running" then
    drop_running(run, fence)
  end
  if grant_fence then
    entry[#entry + 1] = "fence"
    entry[#entry + 1] = grant_fence
  end
  if held_until then
    entry[#entry + 1] = "held_until_ms"
    entry[#entry + 1] = held_until
  end
  id = redis.call("XADD", history, "MAXLEN", a.keep_runs, "*", unpack(entry))
end
redis.call("PEXPIRE", history, a.keep_ms)
return {"recorded", "id", id}
