SELECT id, hostname, pid, started_at, heartbeat_at, delivers FROM nodes ORDER BY id
