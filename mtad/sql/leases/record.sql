-- The outcomes of attempts by node $1 at $2, each with its event, in one statement.
-- Only deliveries still leased to the node are changed.
WITH o AS (
    SELECT * FROM unnest($3::bigint[], $4::delivery_state[], $5::delivery_reason[], $6::smallint[],
                         $7::text[], $8::text[], $9::timestamptz[], $10::text[], $11::jsonb[], $12::text[],
                         $13::boolean[])
         AS o (id, state, reason, code, enhanced, text, next_at, tenant, data, route_group, internal)
),
changed AS (
    UPDATE deliveries d
    SET state = o.state, reason = o.reason,
        last_code = o.code, last_enhanced = o.enhanced, last_text = o.text,
        next_attempt_at = coalesce(o.next_at, d.next_attempt_at),
        attempts = d.attempts + 1,
        failures = d.failures + CASE WHEN o.internal THEN 1 ELSE 0 END,
        route_group = coalesce(o.route_group, d.route_group),
        lease_owner = NULL, lease_expires_at = NULL, attempt_id = NULL, updated_at = $2
    FROM o
    WHERE d.id = o.id AND d.state = 'leased' AND d.lease_owner = $1
    RETURNING d.id, d.message, o.state, o.tenant, o.data
),
logged AS (
    INSERT INTO events (at, kind, message, delivery, tenant, data)
    SELECT $2, state::text, message, id, tenant, data FROM changed
)
SELECT array_agg(id) AS ids FROM changed
