-- Node $1 hands back leases it did not start ($2): queued again, due at $4 (NULL:
-- now, or when they were due if that is sooner), each with an event whose data is
-- $5. At shutdown; and when mail would wait long for a mailbox of its account pool.
-- Returns the ids handed back.
WITH released AS (
    UPDATE deliveries
    SET state = 'queued', reason = 'released', lease_owner = NULL, lease_expires_at = NULL,
        next_attempt_at = coalesce($4, least(next_attempt_at, $3)), updated_at = $3
    WHERE id = ANY($2::bigint[]) AND state::text = 'leased' AND lease_owner = $1 AND attempt_id IS NULL  -- state as text: see record_query.sql
    RETURNING id, message
),
logged AS (
    INSERT INTO events (at, kind, message, delivery, data)
    SELECT $3, 'requeued', message, id, $5::jsonb FROM released
)
SELECT coalesce(array_agg(id), '{}') FROM released
