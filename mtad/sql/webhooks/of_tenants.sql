-- The endpoints of tenants $1, with their secrets: what the webhooks consumer makes
-- requests for. pending is 1 when the endpoint has a row not answered yet (its
-- events then go through the outbox, after it), else 0; no other counts.
SELECT w.id, w.tenant, w.url, w.events, w.batch, w.secret, w.previous_secret, w.previous_until, w.created_at,
       EXISTS (SELECT 1 FROM webhook_messages m WHERE m.endpoint = w.id AND m.state = 'pending')::int AS pending,
       0 AS delivered, 0 AS dead
FROM webhook_endpoints w
WHERE w.tenant = ANY ($1::text[])
ORDER BY w.id
