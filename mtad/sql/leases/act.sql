-- An operator's action on deliveries $1 (that are not in flight or final): retry
-- (due now), cancel or bounce. One held unknown (its relayed send may have gone
-- out) may be retried (sent again) or cancelled, not bounced. Returns the
-- deliveries changed.
WITH target AS (
    SELECT id FROM deliveries
    WHERE id = ANY($1::bigint[])  -- state as text: see leases/record.sql
      AND (state::text IN ('queued', 'deferred') OR (state::text = 'unknown' AND $2::text <> 'bounced'))
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
resolved AS (
    DELETE FROM unknown_sends u USING changed WHERE u.delivery = changed.id
),
logged AS (
    INSERT INTO events (at, kind, message, delivery, data)
    SELECT $3, CASE WHEN $2::delivery_state = 'queued' THEN 'requeued' ELSE $2::text END, message, id,
           jsonb_build_object('reason', 'admin', 'action', $4::text)
    FROM changed
)
SELECT id FROM changed
