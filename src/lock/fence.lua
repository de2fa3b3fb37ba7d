-- fence: raise the fencing counter to at least a floor while the token holds the lock. Redlock
-- runs it on its masters after a grant, so that the counters of independent masters move in step
-- and the next grant's fence (the highest counter of its majority) is higher than this one's.
-- KEYS[1] lock  KEYS[2] state
-- ARGV[1] token  ARGV[2] floor
-- Returns 1 if the counter was raised, 0 if not
local state, token, floor = KEYS[2], ARGV[1], tonumber(ARGV[2])
expect_type(state, "hash", "state")
if redis.call("HGET", state, "token") ~= token then
  return 0
end
if fence_of(state) >= floor then
  return 0
end
redis.call("HSET", state, "fence", floor)
return 1
