-- Every endpoint (of tenant $1 only, when not NULL), by tenant then id (never their secrets).
SELECT w.id, w.tenant, w.url, w.events, w.previous_until, w.created_at
FROM webhook_endpoints w
WHERE $1::text IS NULL OR w.tenant = $1
ORDER BY w.tenant, w.id
