-- The account named $1 (never its secret).
SELECT a.id, a.name, a.address, a.pool, a.host, a.port, a.tls, a.login, a.mechanism,
       a.state::text AS state, a.state_until, a.state_reason, a.daily_cap, a.min_gap, a.gap_jitter_low,
       a.gap_jitter_high, a.per_second, a.per_minute, a.per_hour, a.time_zone, a.created_at, a.updated_at
FROM accounts a
WHERE a.name = $1
