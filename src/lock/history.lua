-- history: the newest runs in a lock's history (record.lua), newest first. Reads only.
--
-- KEYS[1]  the history, {K}:history
-- ARGV     by name (common.lua's args): count, how many runs at most
--
-- Replies: XREVRANGE's, {{ID, {name, value, ...}}, ...}, empty when there is no history.
-- Errors: WRONGTYPE when the key holds something other than a stream.
local history = KEYS[1]
expect_type(history, "stream", "history")
return redis.call("XREVRANGE", history, "+", "-", "COUNT", args().count)
