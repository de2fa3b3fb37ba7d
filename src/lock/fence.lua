-- fence: raise the fencing counter to at least a floor while the token holds the lock. Redlock
-- runs it on its masters after a grant, so that the counters of independent masters move in step
-- and the next grant's fence (the highest counter of its majority) is higher than this one's.
-- KEYS[1] lock  KEYS[2] state
-- ARGV by name (common.lua's args): token; floor
-- Returns a word (common.lua's reply): "raised" if the counter was raised, "kept" if not (the
-- token no longer holds the lock, or the counter is already at the floor or above)
local state = KEYS[2]
local a = args()
local token, floor = a.token, tonumber(a.floor)
expect_type(state, "hash", "state")
if redis.call("HGET", state, "token") ~= token or fence_of(state) >= floor then
  return reply("kept")
end
redis.call("HSET", state, "fence", floor)
return reply("raised")
