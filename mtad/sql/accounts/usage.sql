-- Every account (of pool $2, or of every pool when $2 is NULL) with what it has sent
-- at $1: today's sends in its own time zone, its latest send, and when its gap
-- after that send ends. For `mtad accounts ls`.
SELECT a.id, a.name, a.address, a.pool, a.host, a.port, a.tls, a.login, a.mechanism,
       a.state::text AS state, a.state_until, a.state_reason, a.daily_cap, a.min_gap, a.gap_jitter_low,
       a.gap_jitter_high, a.per_second, a.per_minute, a.per_hour, a.time_zone, a.created_at, a.updated_at,
       today.sends AS today, latest.reserved_at AS last_send,
       latest.reserved_at + make_interval(secs => latest.next_gap) AS gap_until
FROM accounts a
CROSS JOIN LATERAL (
    SELECT count(*) AS sends FROM account_reservations r, mtad_account_day(a.time_zone, $1) AS day
    WHERE r.account = a.id AND r.reserved_at >= lower(day) AND r.reserved_at < upper(day)
) today
LEFT JOIN LATERAL (
    SELECT r.reserved_at, r.next_gap FROM account_reservations r
    WHERE r.account = a.id ORDER BY r.reserved_at DESC LIMIT 1
) latest ON true
WHERE $2::text IS NULL OR a.pool = $2
ORDER BY a.pool, a.name
