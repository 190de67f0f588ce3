-- Node $1 as it registered last (none: never).
SELECT id, hostname, pid, started_at, heartbeat_at, delivers, listening FROM nodes WHERE id = $1
