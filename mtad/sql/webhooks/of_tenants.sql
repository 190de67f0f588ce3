-- The endpoints of tenants $1, with their secrets: what the webhooks consumer makes
-- requests for (no counts).
SELECT w.id, w.tenant, w.url, w.events, w.batch, w.secret, w.previous_secret, w.previous_until, w.created_at,
       0 AS pending, 0 AS delivered, 0 AS dead
FROM webhook_endpoints w
WHERE w.tenant = ANY ($1::text[])
ORDER BY w.id
