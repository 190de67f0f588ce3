-- Reserve sends through the accounts of pool $1 at $2 (NULL: PostgreSQL's clock),
-- least used first among those whose health is at least $7 (the others rest): the
-- i-th asks for $3[i] recipients for delivery $5[i] of node $6 ($4[i]: the caller's
-- uniform draw in [0, 1] for its jitter), in one round trip: see mtad_choose. One
-- row per reservation with how many recipients it got, when it was made, and its
-- account as it was before it (the lapsed state, if any, is over); one per account
-- rested, with its health and the end of its rest; one per want passed over for its
-- campaign's limits (wanted, from 1; limited_until); and without a reservation, a
-- row with the account's columns NULL and whether another caller was reserving on
-- an account.
SELECT c.reservation, c.lapsed, c.contended, c.granted, c.reserved_at, c.health, c.rested_until, c.wanted,
       c.limited_until,
       a.id, a.name, a.address, a.pool, a.host, a.port, a.tls, a.login, a.mechanism,
       a.state::text AS state, a.state_until, a.state_reason, a.daily_cap, a.min_gap, a.gap_jitter_low,
       a.gap_jitter_high, a.per_second, a.per_minute, a.per_hour, a.time_zone, a.created_at, a.updated_at
FROM mtad_choose($1, $2, $3, $4, $5, $6, $7) c
LEFT JOIN accounts a ON a.id = c.account
