-- Node $1 as it registered last (none: never).
SELECT id, hostname, pid, started_at, heartbeat_at, delivers FROM nodes WHERE id = $1
