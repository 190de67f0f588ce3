-- Account pool $1 at $2 (NULL: PostgreSQL's clock): how many accounts it has, how
-- many of them are in an active state, and the earliest time one of them may send
-- again as far as this snapshot can tell (NULL when only an operator can bring one
-- back): the end of a timed state, the end of the gap after the latest send (the
-- soonest it could end for a send still in flight), the next 00:00 of an account at
-- its daily cap.
WITH now AS (SELECT coalesce($2::timestamptz, clock_timestamp()) AS at)
SELECT count(*) AS accounts,
       count(*) FILTER (WHERE mtad_account_state_at(a.state, a.state_until, now.at) = 'active') AS active,
       min(CASE
               WHEN mtad_account_state_at(a.state, a.state_until, now.at) <> 'active' THEN a.state_until
               WHEN a.daily_cap IS NOT NULL AND today.sends >= a.daily_cap THEN upper(mtad_account_day(a.time_zone, now.at))
               ELSE greatest(now.at, coalesce(latest.free_at, now.at + make_interval(secs => latest.next_gap)))
           END) AS next_free
FROM accounts a
CROSS JOIN now
LEFT JOIN LATERAL (
    SELECT r.next_gap,
           mtad_send_free_at(r.reserved_at, r.settled_at, r.next_gap, r.delivery, r.node, now.at) AS free_at
    FROM account_reservations r
    WHERE r.account = a.id ORDER BY r.reserved_at DESC LIMIT 1
) latest ON true
CROSS JOIN LATERAL (SELECT mtad_account_sends(a.id, a.time_zone, now.at) AS sends) today
WHERE a.pool = $1
