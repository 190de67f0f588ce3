-- Node $1 sets aside deliveries $2 (leased to it, not begun) for the suspension
-- ($7 kind, $8 key), if it still stands at $3: queued again, due at $4 (its end;
-- NULL: infinity, until resumed), routed to group $5, each with a requeued event
-- of data $6. The suspension's row is locked FOR SHARE, so a resume (which deletes
-- it, then makes what was set aside due) waits for this statement, or this one
-- finds it gone and sets nothing aside. Returns the ids set aside.
WITH standing AS MATERIALIZED (
    SELECT 1 FROM suspensions WHERE kind = $7 AND key = $8 AND (until IS NULL OR until > $3) FOR SHARE
),
held AS (
    UPDATE deliveries
    SET state = 'queued', reason = 'released', lease_owner = NULL, lease_expires_at = NULL,
        next_attempt_at = coalesce($4::timestamptz, 'infinity'), route_group = coalesce($5, route_group),
        updated_at = $3
    WHERE EXISTS (SELECT 1 FROM standing)
      AND id = ANY($2::bigint[]) AND state::text = 'leased' AND lease_owner = $1 AND attempt_id IS NULL  -- state as text: see leases/record_query.sql
    RETURNING id, message
),
logged AS (
    INSERT INTO events (at, kind, message, delivery, data)
    SELECT $3, 'requeued', message, id, $6::jsonb FROM held
)
SELECT coalesce(array_agg(id), '{}') FROM held
