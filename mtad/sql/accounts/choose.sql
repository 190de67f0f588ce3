-- Reserve up to $3 sends through the accounts of pool $1 at $2, least used first
-- ($4: the caller's uniform draws in [0, 1] for their jitter), in one round trip:
-- see mtad_choose (migration 0007). One row per reservation with its account as
-- it was before it (the lapsed state, if any, is over); or one row with the
-- account's columns NULL and whether another caller was reserving on an account.
SELECT c.reservation, c.lapsed, c.contended,
       a.id, a.name, a.address, a.pool, a.host, a.port, a.tls, a.login, a.mechanism,
       a.state::text AS state, a.state_until, a.state_reason, a.daily_cap, a.min_gap, a.gap_jitter_low,
       a.gap_jitter_high, a.per_second, a.per_minute, a.per_hour, a.time_zone, a.created_at, a.updated_at
FROM mtad_choose($1, $2, $3, $4) c
LEFT JOIN accounts a ON a.id = c.account
