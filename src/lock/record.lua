-- record: appends one run to a lock's history, a stream capped at a number of runs, which
-- expires a set time after the last run recorded (every key rlock writes expires).
--
-- KEYS[1]    the history, {K}:history (in the lock's cluster slot)
-- ARGV[1]    how many runs to keep: exact MAXLEN (an approximate `~` trims only whole stream
--            nodes, 100 entries by default, so a cap of 10 would keep 100)
-- ARGV[2]    how long the history lives after this run, ms
-- ARGV[3..]  the run's fields, name then value (src/lock/history.rs)
--
-- Replies: {"recorded", "id", ID}. Errors, nothing written: WRONGTYPE when the key holds
-- something other than a stream; NOPERM (checked first on Redis 7) when the user may not XADD
-- or PEXPIRE it.
local history = KEYS[1]
expect_type(history, "stream", "history")
expect_rights({{"XADD", history, "MAXLEN", "1", "*", "f", "v"}, {"PEXPIRE", history, "1"}})
local fields = {}
for i = 3, #ARGV do
  fields[#fields + 1] = ARGV[i]
end
local id = redis.call("XADD", history, "MAXLEN", ARGV[1], "*", unpack(fields))
redis.call("PEXPIRE", history, ARGV[2])
return reply("recorded", "id", id)
