-- Deliveries with their message's envelope, oldest first: those after id $8, at
-- most $9 (NULL: all) that match the filters $1..$7 of queue/match.sql.
SELECT d.id, d.message, m.message_id, m.tenant, m.sender, d.recipient, d.domain,
       d.state::text AS state, d.priority, d.attempts, d.next_attempt_at,
       d.last_code, d.last_enhanced, d.last_text, d.reason::text AS reason,
       d.lease_owner, d.lease_expires_at, d.created_at, d.updated_at, d.route_group
FROM deliveries d
JOIN messages m ON m.id = d.message
WHERE d.id > $8
  AND
\include queue/match
ORDER BY d.id
LIMIT $9
