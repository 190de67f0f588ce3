-- Deliveries with their message's envelope, oldest first: those after id $8, at
-- most $9 (NULL: all). The filters, as in every statement of queue/ (NULL: any):
-- $1 states, $2 tenant, $3 provider group ('-': never attempted), $4 domain,
-- $5 created at or before, $6 message, $7 delivery.
SELECT d.id, d.message, m.message_id, m.tenant, m.sender, d.recipient, d.domain,
       d.state::text AS state, d.priority, d.attempts, d.next_attempt_at,
       d.last_code, d.last_enhanced, d.last_text, d.reason::text AS reason,
       d.lease_owner, d.lease_expires_at, d.created_at, d.updated_at, d.route_group
FROM deliveries d
JOIN messages m ON m.id = d.message
WHERE d.id > $8
  AND ($1::text[] IS NULL OR d.state::text = ANY($1::text[]))
  AND ($2::text IS NULL OR m.tenant = $2::text)
  AND ($3::text IS NULL OR coalesce(d.route_group, '-') = $3::text)
  AND ($4::text IS NULL OR d.domain = $4::text)
  AND ($5::timestamptz IS NULL OR d.created_at <= $5::timestamptz)
  AND ($6::uuid IS NULL OR d.message = $6::uuid)
  AND ($7::bigint IS NULL OR d.id = $7::bigint)
ORDER BY d.id
LIMIT $9
