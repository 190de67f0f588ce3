-- Every account (of pool $2, or of every pool when $2 is NULL) with what it has sent
-- at $1: today's recipients in its own time zone, its latest send, when its gap
-- after that send ends (NULL while it holds the mailbox in flight: sending), and its
-- health (mtad_account_health). For `mtad accounts ls`.
SELECT a.id, a.name, a.address, a.pool, a.host, a.port, a.tls, a.login, a.mechanism,
       a.state::text AS state, a.state_until, a.state_reason, a.daily_cap, a.min_gap, a.gap_jitter_low,
       a.gap_jitter_high, a.per_second, a.per_minute, a.per_hour, a.time_zone, a.created_at, a.updated_at,
       today.sends AS today, latest.reserved_at AS last_send,
       latest.free_at AS gap_until, latest.reserved_at IS NOT NULL AND latest.free_at IS NULL AS sending,
       mtad_account_health(a.id, a.health_since, $1) AS health
FROM accounts a
CROSS JOIN LATERAL (SELECT mtad_account_sends(a.id, a.time_zone, $1) AS sends) today
LEFT JOIN LATERAL (
    SELECT r.reserved_at,
           mtad_send_free_at(r.reserved_at, r.settled_at, r.next_gap, r.delivery, r.node, $1) AS free_at
    FROM account_reservations r
    WHERE r.account = a.id ORDER BY r.reserved_at DESC LIMIT 1
) latest ON true
WHERE $2::text IS NULL OR a.pool = $2
ORDER BY a.pool, a.name
