-- Account pool $1 at $2: how many accounts it has, how many of them are in an
-- active state, and the earliest time one of them may send again as far as this
-- snapshot can tell (NULL when only an operator can bring one back): the end of a
-- timed state, the end of the gap after the latest send, the next 00:00 of an
-- account at its daily cap.
SELECT count(*) AS accounts,
       count(*) FILTER (WHERE mtad_account_state_at(a.state, a.state_until, $2) = 'active') AS active,
       min(CASE
               WHEN mtad_account_state_at(a.state, a.state_until, $2) <> 'active' THEN a.state_until
               WHEN a.daily_cap IS NOT NULL AND today.sends >= a.daily_cap THEN upper(mtad_account_day(a.time_zone, $2))
               ELSE greatest($2, latest.free_at)
           END) AS next_free
FROM accounts a
LEFT JOIN LATERAL (
    SELECT mtad_gap_end(r.reserved_at, r.settled_at, r.next_gap) AS free_at
    FROM account_reservations r
    WHERE r.account = a.id ORDER BY r.reserved_at DESC LIMIT 1
) latest ON true
CROSS JOIN LATERAL (SELECT mtad_account_sends(a.id, a.time_zone, $2) AS sends) today
WHERE a.pool = $1
