-- common: prepended to the scripts that need it (see mod.rs); Redis sees one script.
if redis.replicate_commands then pcall(redis.replicate_commands) end

-- The server's clock in milliseconds: one clock for every rlock, whatever the hosts' clocks say.
local function now_ms()
  local t = redis.call("TIME")
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- Names the first waiter whose lease is live on the wake channel, dropping dead ones from the
-- line; publishes "*" (anyone) when nobody waits in line, for waiters that do not queue.
local function wake_next(queue, state, channel, now)
  while true do
    local head = redis.call("ZRANGE", queue, 0, 0)[1]
    if not head then
      redis.call("PUBLISH", channel, "*")
      return
    end
    local until_ms = tonumber(redis.call("HGET", state, "w:" .. head)) or 0
    if until_ms > now then
      redis.call("PUBLISH", channel, head)
      return
    end
    redis.call("ZREM", queue, head)
    redis.call("HDEL", state, "w:" .. head)
  end
end

