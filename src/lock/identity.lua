-- identity: which server this is, so that Redlock counts each server once however many names
-- (localhost, 127.0.0.1, ::1, its host name) reach it. No KEYS, no ARGV. Writes nothing.
-- Returns the server's run_id (INFO server: a random id, new at every start), or nil when the
-- ACL user may not run INFO (asked first with redis.acl_check_cmd on Redis 7, so that the ACL
-- LOG stays free of refusals; before Redis 7 a refused INFO is an error).
if redis.acl_check_cmd and not redis.acl_check_cmd("INFO", "server") then
  return false
end
return string.match(redis.call("INFO", "server"), "run_id:(%x+)") or false
