-- An unsubscribed event at $1 ($2: 'unsubscribed'), as leases/record_query.sql writes one
-- (message $3, delivery $4, tenant $5, data $6), unless the same delivery has
-- one: an event for recipient $7 (lower case) of the same message, or, with no
-- message known, of the same tenant. The caller holds unsubscribe_lock's lock.
-- Returns the event's id: the new one, else the earlier one's.
WITH about AS (
    SELECT coalesce($3::uuid, d.message) AS message, d.id AS delivery, coalesce($5::text, m.tenant) AS tenant
    FROM (SELECT 1) AS one
    LEFT JOIN deliveries d ON d.id = $4::bigint
    LEFT JOIN messages m ON m.id = coalesce($3::uuid, d.message)
),
earlier AS (
    (SELECT e.id FROM events e
     WHERE e.message = (SELECT message FROM about) AND e.kind = 'unsubscribed'
       AND lower(e.data ->> 'recipient') = $7
     LIMIT 1)
    UNION ALL
    (SELECT e.id FROM events e  -- a token that names no message: rare, and a longer look
     WHERE (SELECT message FROM about) IS NULL AND e.message IS NULL AND e.kind = 'unsubscribed'
       AND e.tenant = (SELECT tenant FROM about) AND lower(e.data ->> 'recipient') = $7
     LIMIT 1)
),
added AS (
    INSERT INTO events (at, kind, message, delivery, tenant, data)
    SELECT $1, $2, message, delivery, tenant, $6::jsonb FROM about
    WHERE NOT EXISTS (SELECT 1 FROM earlier)
    RETURNING id
)
SELECT id FROM added
UNION ALL
SELECT id FROM earlier
LIMIT 1
