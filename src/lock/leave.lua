-- leave: a waiter gives up (timeout or signal). It leaves the queue, releases a grant that raced
-- with giving up, and if a free lock was reserved for it, hands it to the next waiter.
-- KEYS[1] lock  KEYS[2] state  KEYS[3] queue
-- ARGV by name (common.lua's args): token; channel (the wake channel)
-- Returns a word (common.lua's reply): "released" (a raced grant was given back) or "left"
local lock, state, queue = KEYS[1], KEYS[2], KEYS[3]
local a = args()
local token, channel = a.token, a.channel
local now = now_ms()
-- Checks (common.lua), all before the first write.
expect_type(state, "hash", "state")
expect_type(queue, "zset", "queue")
expect_rights({{"ZREM", queue, token}, {"HDEL", state, "next"}, {"DEL", lock},
  {"HSET", state, "released", "1"}, {"PEXPIRE", state, "1"}, {"PUBLISH", channel, "*"}})
local was_next = redis.call("HGET", state, "next") == token
redis.call("ZREM", queue, token)
redis.call("HDEL", state, "go:" .. token)
local kind, mode = lock_kind(lock, state)
if mode then
  -- A semaphore or shared lock (multi.lua): give back a raced grant, and let in whoever may
  -- come in now that this waiter is out of the way.
  local held = redis.call("ZSCORE", lock, token)
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
if kind == "string" and redis.call("GET", lock) == token then
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
