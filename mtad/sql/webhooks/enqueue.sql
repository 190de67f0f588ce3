-- The rows of a batch of events, one per endpoint and event: (endpoint $1, event $2,
-- message $3, payload $4), due at $5. The NOTIFY wakes every node's sender at COMMIT.
WITH written AS (
    INSERT INTO webhook_messages (endpoint, event, message, payload, next_at, created_at)
    SELECT r.endpoint, r.event, r.message, r.payload, $5, $5
    FROM unnest($1::bigint[], $2::bigint[], $3::uuid[], $4::text[]) AS r (endpoint, event, message, payload)
)
SELECT pg_notify('mtad_webhooks', '')
