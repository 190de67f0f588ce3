-- Put the account named $1 in state $2 until $3 (NULL: until changed) because of $4,
-- if the state it is in at $6 is one of $5 (the states mtad.accounts.TRANSITIONS
-- allows the move from). Returns the account as get does, or no row when it does
-- not exist or the move is not allowed.
UPDATE accounts a
SET state = $2::account_state, state_until = $3, state_reason = $4, updated_at = now()
WHERE a.name = $1 AND mtad_account_state_at(a.state, a.state_until, $6) = ANY($5::account_state[])
RETURNING a.id, a.name, a.address, a.pool, a.host, a.port, a.tls, a.login, a.mechanism,
          a.state::text AS state, a.state_until, a.state_reason, a.daily_cap, a.min_gap, a.gap_jitter_low,
          a.gap_jitter_high, a.per_second, a.per_minute, a.per_hour, a.time_zone, a.created_at, a.updated_at
