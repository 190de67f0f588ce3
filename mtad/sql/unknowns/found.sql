-- The sends held unknown $1 were found sent at $2 (in their account's Sent folder):
-- delivered, each with a 'delivered' event saying how it was known ($3, merged into
-- its recipient and group). Returns the ids changed.
WITH changed AS (
    UPDATE deliveries d
    SET state = 'delivered', reason = NULL, updated_at = $2
    WHERE d.id = ANY($1::bigint[]) AND d.state::text = 'unknown'  -- as text: see leases/record_query.sql
    RETURNING d.id, d.message, d.recipient, d.route_group
),
gone AS (
    DELETE FROM unknown_sends u USING changed WHERE u.delivery = changed.id
),
logged AS (
    INSERT INTO events (at, kind, message, delivery, tenant, data)
    SELECT $2, 'delivered', c.message, c.id, m.tenant,
           jsonb_build_object('recipient', c.recipient, 'group', c.route_group, 'class', 'delivered') || $3::jsonb
    FROM changed c JOIN messages m ON m.id = c.message
)
SELECT coalesce(array_agg(id), '{}') AS ids FROM changed
