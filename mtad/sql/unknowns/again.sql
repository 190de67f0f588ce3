-- The sends held unknown $1 were not found sent by $2, when their wait was over:
-- queued, due now, to be sent again, each with a 'requeued' event whose data is $3.
-- Returns the ids changed.
WITH changed AS (
    UPDATE deliveries d
    SET state = 'queued', next_attempt_at = $2, updated_at = $2
    WHERE d.id = ANY($1::bigint[]) AND d.state::text = 'unknown'  -- as text: see leases/record.sql
    RETURNING d.id, d.message
),
gone AS (
    DELETE FROM unknown_sends u USING changed WHERE u.delivery = changed.id
),
logged AS (
    INSERT INTO events (at, kind, message, delivery, data)
    SELECT $2, 'requeued', message, id, $3::jsonb FROM changed
)
SELECT coalesce(array_agg(id), '{}') AS ids FROM changed
