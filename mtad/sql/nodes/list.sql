SELECT id, hostname, pid, started_at, heartbeat_at FROM nodes ORDER BY id
