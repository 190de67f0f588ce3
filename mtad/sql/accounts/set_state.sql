-- Put the account named $1 in state $2 until $3 (NULL: until changed) because of $4,
-- if the state it is in at $6 is one of $5 (the states mtad.accounts.TRANSITIONS
-- allows the move from), with its account_state event (mtad_account_move).
-- Returns the account as get does and the state it was in, or no row when it does
-- not exist or the move is not allowed.
WITH moved AS (
    SELECT m.id, m.was FROM mtad_account_move($1, $2::account_state, $3, $4, $5::account_state[], $6) m
)
SELECT a.id, a.name, a.address, a.pool, a.host, a.port, a.tls, a.login, a.mechanism,
       $2::text AS state, $3::timestamptz AS state_until, $4::text AS state_reason, a.daily_cap, a.min_gap,
       a.gap_jitter_low, a.gap_jitter_high, a.per_second, a.per_minute, a.per_hour, a.time_zone, a.created_at,
       $6::timestamptz AS updated_at, moved.was::text AS was
FROM moved JOIN accounts a ON a.id = moved.id
