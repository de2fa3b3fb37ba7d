-- leave: a waiter gives up (timeout or signal). It leaves the queue, releases a grant that raced
-- with giving up, and if a free lock was reserved for it, hands it to the next waiter.
-- KEYS[1] lock  KEYS[2] state  KEYS[3] queue
-- ARGV by name (common.lua's args): token; channel (the wake channel); upto (the number of the
--   giver's latest try: a grant is given back only when a try up to it took it, never when a
--   later try did, which this give-back, run late, must not undo; without it, any grant)
-- Returns a word (common.lua's reply): "released" (a raced grant was given back) or "left"
local lock, state, queue = KEYS[1], KEYS[2], KEYS[3]
local a = args()
local token, channel, upto = a.token, a.channel, tonumber(a.upto)
local now = now_ms()
-- Whether the grant whose record says it was taken by try `try` is this give-back's to undo.
local function given_by_then(try)
  return not upto or (tonumber(try) or 0) <= upto
end
-- Checks (common.lua), all before the first write.
expect_type(state, "hash", "state")
expect_type(queue, "zset", "queue")
expect_rights({{"ZREM", queue, token}, {"HDEL", state, "next"}, {"DEL", lock},
  {"HSET", state, "released", "1"}, {"PEXPIRE", state, "1"}, {"PUBLISH", channel, "*"}})
local was_next = redis.call("HGET", state, "next") == token
leave_line(queue, state, token)
redis.call("HDEL", state, "go:" .. token)
local kind, mode = lock_kind(lock, state)
if mode then
  -- A semaphore or shared lock (multi.lua): give back a raced grant, and let in whoever may
  -- come in now that this waiter is out of the way.
  local held = redis.call("ZSCORE", lock, token)
    and given_by_then((record_of(state, token) or {}).try)
  if held then
    redis.call("ZREM", lock, token)
    redis.call("HDEL", state, "h:" .. token)
  end
  after_leaving(lock, state, queue, channel, now)
  if held then
    shorten_state(lock, state, now)
    return reply("released")
  end
  return reply("left")
end
local released = false
if kind == "string" and redis.call("GET", lock) == token
    and given_by_then(redis.call("HGET", state, "try")) then
  redis.call("DEL", lock)
  redis.call("HSET", state, "released", now)
  released = true
end
if released or (was_next and kind == "none") then
  hand_off(queue, state, channel, now)
end
if released then
  keep_at_most(state, AFTER_RELEASE_MS)
  return reply("released")
end
return reply("left")
