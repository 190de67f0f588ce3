-- Which session holds the claim on node id $1 (claim.sql): its backend pid, and
-- whether that is this session (none: no one).
SELECT pid, pid = pg_backend_pid() AS mine FROM pg_locks
WHERE locktype = 'advisory' AND granted
  AND classid = hashtext('mtad_node')::oid AND objid = hashtext($1)::oid AND objsubid = 2
