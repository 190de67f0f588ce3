-- A new account ($1..$16, in the order of the columns below); returns it as get does.
INSERT INTO accounts AS a (name, address, pool, host, port, tls, login, mechanism, daily_cap, min_gap,
                           gap_jitter_low, gap_jitter_high, per_second, per_minute, per_hour, time_zone)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16)
RETURNING a.id, a.name, a.address, a.pool, a.host, a.port, a.tls, a.login, a.mechanism,
          a.state::text AS state, a.state_until, a.state_reason, a.daily_cap, a.min_gap, a.gap_jitter_low,
          a.gap_jitter_high, a.per_second, a.per_minute, a.per_hour, a.time_zone, a.created_at, a.updated_at
