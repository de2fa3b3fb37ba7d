-- once: the window record of `exec --once-per` (src/lock/once.rs): the latest window of a key's
-- schedule whose run succeeded. Windows are counted by the server's clock from the Unix epoch,
-- so every host agrees which window "now" is, whatever its own clock says.
--
-- KEYS[1] lock  KEYS[2] the window record, {K}:once (a hash: window, the index of the latest
--         window done; host and run, the run that did it; at, when, server ms)
-- ARGV by name (common.lua's args): op, "look" or "mark"; window_ms, the window's length; for
--      "mark": token (only the lock's holder marks), window (the index of the window the run
--      fired in), host, run
--
-- Replies:
--   {"look", "now", MS, "done", INDEX, "host", H, "run", R, "at", MS}   (done, host, run and at
--       absent when no window is on record)
--   {"marked", "now", MS}  the record says `window` or a later one (a later one is kept)
--   {"not-owner"}          the token does not hold the lock: nothing written
-- Errors, nothing written: WRONGTYPE when the record key holds something else, or a record
-- whose window is no whole number (damaged, or another program's): never trusted.
local a = args()
local lock, record = KEYS[1], KEYS[2]
local window_ms = tonumber(a.window_ms)
local now = now_ms()
expect_type(record, "hash", "window record")
local done = redis.call("HGET", record, "window")
if done and not string.match(done, "^%-?%d+$") then
  raise("WRONGTYPE rlock's window record '" .. record .. "' is damaged: window '" ..
    string.sub(done, 1, 40) .. "' is no whole number")
end
if a.op == "look" then
  if not done then
    return reply("look", "now", now)
  end
  local r = redis.call("HMGET", record, "host", "run", "at")
  return reply("look", "now", now, "done", done, "host", r[1], "run", r[2], "at", r[3])
end
if redis.call("GET", lock) ~= a.token then
  return reply("not-owner")
end
expect_rights({{"HSET", record, "window", a.window}, {"PEXPIRE", record, "1"}})
if not done or tonumber(done) < tonumber(a.window) then
  redis.call("HSET", record, "window", a.window, "host", a.host, "run", a.run, "at", now)
end
-- A window's record matters to the firings of that window only: two windows, and the time a
-- lock's helper keys outlive it, and it is gone.
redis.call("PEXPIRE", record, 2 * window_ms + KEEP_MS)
return reply("marked", "now", now)
