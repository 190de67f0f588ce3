-- Node $1 hands back leases it did not start (at shutdown): queued again, due now.
WITH released AS (
    UPDATE deliveries
    SET state = 'queued', reason = 'released', lease_owner = NULL, lease_expires_at = NULL,
        next_attempt_at = least(next_attempt_at, $3), updated_at = $3
    WHERE id = ANY($2::bigint[]) AND state = 'leased' AND lease_owner = $1 AND attempt_id IS NULL
    RETURNING id, message
),
logged AS (
    INSERT INTO events (at, kind, message, delivery, data)
    SELECT $3, 'requeued', message, id, '{"reason": "released"}' FROM released
)
SELECT count(*) FROM released
