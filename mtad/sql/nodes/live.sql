-- How many nodes heartbeat at or after $1 (live ones share every bucket).
SELECT count(*) FROM nodes WHERE heartbeat_at >= $1
