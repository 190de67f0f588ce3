-- The accounts of pool $1 that may send at $2 as far as this snapshot can tell (in
-- an active state, past the gap after their latest send, under the daily cap),
-- least used first: fewest sends today (in each account's time zone), then longest
-- since the latest send (never first), then by id. mtad_reserve decides; this only
-- orders the tries and spares a try on an account that would surely refuse.
--
-- The cheap tests first (an index probe per account for its latest send), so that
-- today's sends are counted only for the accounts that pass them: with minutes-long
-- gaps, most accounts of a busy pool are inside theirs.
WITH free AS MATERIALIZED (
    SELECT a.id, latest.reserved_at AS last_send
    FROM accounts a
    LEFT JOIN LATERAL (
        SELECT r.reserved_at,
               greatest(r.reserved_at, r.settled_at) + make_interval(secs => r.next_gap) AS free_at
        FROM account_reservations r
        WHERE r.account = a.id ORDER BY r.reserved_at DESC LIMIT 1
    ) latest ON true
    WHERE a.pool = $1
      AND mtad_account_state_at(a.state, a.state_until, $2) = 'active'
      AND (latest.reserved_at IS NULL OR latest.free_at <= $2)
)
SELECT a.id, a.name, a.address, a.pool, a.host, a.port, a.tls, a.login, a.mechanism,
       a.state::text AS state, a.state_until, a.state_reason, a.daily_cap, a.min_gap, a.gap_jitter_low,
       a.gap_jitter_high, a.per_second, a.per_minute, a.per_hour, a.time_zone, a.created_at, a.updated_at,
       today.sends AS today, free.last_send
FROM free
JOIN accounts a ON a.id = free.id
CROSS JOIN LATERAL (
    SELECT count(*) AS sends FROM account_reservations r, mtad_account_day(a.time_zone, $2) AS day
    WHERE r.account = a.id AND r.reserved_at >= lower(day) AND r.reserved_at < upper(day)
) today
WHERE a.daily_cap IS NULL OR today.sends < a.daily_cap
ORDER BY today.sends, free.last_send NULLS FIRST, a.id
