-- Reserve one send through an account of pool $1 at $2, least used first ($3: the
-- caller's uniform draw in [0, 1] for the gap's jitter), in one round trip: see
-- mtad_choose (migration 0007). Returns one row: the account reserved (its columns
-- NULL when none was), the reservation, the timed state it ended, and whether an
-- account was skipped because another caller was reserving on it.
SELECT c.reservation, c.lapsed, c.contended,
       a.id, a.name, a.address, a.pool, a.host, a.port, a.tls, a.login, a.mechanism,
       a.state::text AS state, a.state_until, a.state_reason, a.daily_cap, a.min_gap, a.gap_jitter_low,
       a.gap_jitter_high, a.per_second, a.per_minute, a.per_hour, a.time_zone, a.created_at, a.updated_at
FROM mtad_choose($1, $2, $3) c
LEFT JOIN accounts a ON a.id = c.account
