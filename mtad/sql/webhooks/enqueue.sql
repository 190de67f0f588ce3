-- The rows of a batch of events, in order: (endpoint $1, event $2, message $3,
-- payload $4), written at $5. A row that went out once already, at the consumer's
-- first attempt, has the number of the request it went in ($6; NULL: never sent):
-- the rows of one number are one request again, with its webhook-id $7, due again
-- at $8 after the error $9, or, where $8 is NULL, leased by node $10 until $11 (its
-- answer is still to come). The events endpoints $12 took at the first attempt are
-- counted ($13 each). Returns each sent request's number, id (its first row's) and
-- rows; the NOTIFY wakes every node's sender at COMMIT.
WITH r AS MATERIALIZED (
    SELECT nextval(pg_get_serial_sequence('webhook_messages', 'id')) AS id, r.*
    FROM unnest($1::bigint[], $2::bigint[], $3::uuid[], $4::text[], $6::integer[], $7::text[], $8::timestamptz[],
                $9::text[]) AS r (endpoint, event, message, payload, sent, webhook_id, next_at, error)
),
written AS (
    INSERT INTO webhook_messages (id, endpoint, event, message, payload, request, webhook_id, attempts, next_at,
                                  last_error, leased_by, leased_until, created_at)
    OVERRIDING SYSTEM VALUE
    SELECT r.id, r.endpoint, r.event, r.message, r.payload,
           CASE WHEN r.sent IS NOT NULL THEN min(r.id) OVER (PARTITION BY r.sent) END, r.webhook_id,
           CASE WHEN r.sent IS NOT NULL THEN 1 ELSE 0 END, coalesce(r.next_at, $5), r.error,
           CASE WHEN r.sent IS NOT NULL AND r.next_at IS NULL THEN $10 END,
           CASE WHEN r.sent IS NOT NULL AND r.next_at IS NULL THEN $11::timestamptz END, $5
    FROM r
),
counted AS (
    INSERT INTO webhook_delivered AS d (endpoint, events)
    SELECT c.endpoint, c.events FROM unnest($12::bigint[], $13::bigint[]) AS c (endpoint, events)
    ON CONFLICT (endpoint) DO UPDATE SET events = d.events + excluded.events
)
SELECT r.sent, min(r.id) AS request, array_agg(r.id ORDER BY r.id) AS rows
FROM r WHERE r.sent IS NOT NULL GROUP BY r.sent
UNION ALL
SELECT NULL, NULL, NULL FROM (SELECT pg_notify('mtad_webhooks', '') FROM r LIMIT 1) n
