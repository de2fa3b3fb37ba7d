-- cluster_info: INFO cluster, for a listing to tell a node of a Redis Cluster from a server on
-- its own (backend/single.rs). No KEYS, no ARGV.
-- Returns the text of INFO cluster, or nil when the ACL user may not run INFO.
--
-- INFO is not among the rights a lock user needs. Asked from a script, its right is checked
-- first (redis.acl_check_cmd, Redis 7), so a user without it is not refused, and the ACL LOG
-- stays free of refusals. (Before Redis 7 the refused INFO is logged.)
if redis.acl_check_cmd and not redis.acl_check_cmd("INFO", "cluster") then
  return nil
end
return redis.call("INFO", "cluster")
