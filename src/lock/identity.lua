-- identity: which server this is and what it is, so that Redlock counts each server once however
-- many names (localhost, 127.0.0.1, ::1, its host name, a proxy) reach it, never counts a replica,
-- and knows how long the server has kept its data. No KEYS, no ARGV. Writes nothing.
-- Returns {run_id, uptime in seconds, role, its master as "host:port" or "", redis_mode} (INFO server and
-- INFO replication: the run_id is random and new at every start), or false when the ACL user may
-- not run INFO (asked first with redis.acl_check_cmd on Redis 7, so that the ACL LOG stays free
-- of refusals; before Redis 7 a refused INFO is an error).
if redis.acl_check_cmd and not redis.acl_check_cmd("INFO", "server") then
  return false
end
local server = redis.call("INFO", "server")
local replication = redis.call("INFO", "replication")
local run_id = string.match(server, "run_id:(%x+)")
if not run_id then
  return false
end
local uptime = tonumber(string.match(server, "uptime_in_seconds:(%d+)")) or 0
local role = string.match(replication, "role:(%a+)") or "master"
local master = ""
if role ~= "master" then
  master = (string.match(replication, "master_host:([^\r\n]+)") or "?") .. ":" ..
    (string.match(replication, "master_port:(%d+)") or "?")
end
-- Valkey names the field server_mode.
local mode = string.match(server, "redis_mode:(%a+)") or string.match(server, "server_mode:(%a+)") or
  "standalone"
return {run_id, uptime, role, master, mode}
