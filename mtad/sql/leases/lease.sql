-- Lease up to $2 due deliveries to node $1 until $3, priority first, then age.
-- SKIP LOCKED: nodes leasing at once take different rows and never wait.
-- Returns what delivery needs, with the envelope of each delivery's message.
WITH due AS (
    SELECT id FROM deliveries
    WHERE state IN ('queued', 'deferred') AND next_attempt_at <= $4
    ORDER BY priority DESC, next_attempt_at
    LIMIT $2
    FOR UPDATE SKIP LOCKED
)
UPDATE deliveries d
SET state = 'leased', lease_owner = $1, lease_expires_at = $3, updated_at = $4
FROM due
WHERE d.id = due.id
RETURNING d.id, d.message, d.recipient, d.domain, d.priority, d.attempts, d.failures,
          d.attempt_id, d.created_at, d.next_attempt_at
