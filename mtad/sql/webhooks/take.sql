-- Node $1 leases until $3 up to $4 requests due at $2, oldest first, none of endpoints
-- $5 (those with as many in flight as they may have), and only the oldest pending
-- request of each (endpoint, message), so that one message's go out in order.
UPDATE webhook_messages m
SET leased_by = $1, leased_until = $3, attempts = m.attempts + 1
FROM webhook_endpoints w
WHERE w.id = m.endpoint AND m.id IN (
    SELECT d.id FROM webhook_messages d
    WHERE d.state = 'pending' AND d.next_at <= $2 AND (d.leased_until IS NULL OR d.leased_until <= $2)
      AND NOT (d.endpoint = ANY ($5::bigint[]))
      AND (d.message IS NULL OR NOT EXISTS (
          SELECT 1 FROM webhook_messages o
          WHERE o.endpoint = d.endpoint AND o.message = d.message AND o.state = 'pending' AND o.id < d.id))
    ORDER BY d.next_at, d.id
    LIMIT $4
    FOR UPDATE SKIP LOCKED
)
RETURNING m.id, m.endpoint, w.tenant, w.url, m.payload, m.attempts, m.created_at
