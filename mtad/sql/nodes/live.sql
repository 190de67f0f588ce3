-- How many delivering nodes heartbeat at or after $1 (they share every bucket).
SELECT count(*) FROM nodes WHERE heartbeat_at >= $1 AND delivers
