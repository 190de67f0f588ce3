-- The nodes live at $1 (a heartbeat since), each with whether it has applied the
-- controls of version $2, and its last heartbeat.
SELECT id, heartbeat_at, coalesce(controls_applied >= $2, false) AS applied
FROM nodes WHERE heartbeat_at >= $1 ORDER BY id
