-- The sends held unknown through the accounts $1 that are due a look in their
-- account's Sent folder at $2: never looked for, last looked for $3 seconds ago or
-- more, or whose wait is over (the last look before they are sent again). Each
-- with its message's Message-ID and when it is sent again unless found.
SELECT u.delivery, u.account, m.message_id, d.next_attempt_at AS until
FROM unknown_sends u
JOIN deliveries d ON d.id = u.delivery
JOIN messages m ON m.id = d.message
WHERE u.account = ANY($1::integer[]) AND d.state::text = 'unknown'  -- as text: see leases/record_query.sql
  AND (u.looked_at IS NULL OR u.looked_at <= $2::timestamptz - make_interval(secs => $3::double precision)
       OR d.next_attempt_at <= $2::timestamptz)
ORDER BY u.delivery
