-- An operator's action on deliveries $1 (that are not in flight or final): retry
-- (due now), cancel or bounce. Returns the deliveries changed.
WITH target AS (
    SELECT id FROM deliveries
    WHERE id = ANY($1::bigint[]) AND state::text IN ('queued', 'deferred')  -- as text: see leases/record.sql
    FOR UPDATE
),
changed AS (
    UPDATE deliveries d
    SET state = $2::delivery_state,
        reason = CASE WHEN $2::delivery_state = 'queued' THEN d.reason ELSE 'admin' END,
        next_attempt_at = CASE WHEN $2::delivery_state = 'queued' THEN $3 ELSE d.next_attempt_at END,
        updated_at = $3
    FROM target
    WHERE d.id = target.id
    RETURNING d.id, d.message
),
logged AS (
    INSERT INTO events (at, kind, message, delivery, data)
    SELECT $3, CASE WHEN $2::delivery_state = 'queued' THEN 'requeued' ELSE $2::text END, message, id,
           jsonb_build_object('reason', 'admin', 'action', $4::text)
    FROM changed
)
SELECT id FROM changed
