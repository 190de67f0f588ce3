-- A node (re)joins: a restarted node keeps its id and gets a fresh start time.
-- $5: whether it delivers (an accept-only node shares no bucket).
INSERT INTO nodes (id, hostname, pid, started_at, heartbeat_at, delivers)
VALUES ($1, $2, $3, $4, $4, $5)
ON CONFLICT (id) DO UPDATE
    SET hostname = excluded.hostname, pid = excluded.pid,
        started_at = excluded.started_at, heartbeat_at = excluded.heartbeat_at, delivers = excluded.delivers,
        listening = NULL
