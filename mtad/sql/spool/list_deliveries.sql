-- Deliveries with their message's envelope, oldest first.
-- $1 state or NULL for every state; $2 a message id or NULL for every message;
-- $3 a provider group or NULL for every group.
SELECT d.id, d.message, m.message_id, m.tenant, m.sender, d.recipient, d.domain,
       d.state::text AS state, d.priority, d.attempts, d.next_attempt_at,
       d.last_code, d.last_enhanced, d.last_text, d.reason::text AS reason,
       d.lease_owner, d.lease_expires_at, d.created_at, d.updated_at, d.route_group
FROM deliveries d
JOIN messages m ON m.id = d.message
WHERE ($1::delivery_state IS NULL OR d.state = $1::delivery_state)
  AND ($2::uuid IS NULL OR d.message = $2::uuid)
  AND ($3::text IS NULL OR d.route_group = $3::text)
ORDER BY d.id
