-- Every endpoint (of tenant $1 only, when not NULL), by tenant then id (never their
-- secrets), with how many of its events are pending, delivered and dead.
SELECT w.id, w.tenant, w.url, w.events, w.batch, w.previous_until, w.created_at,
       count(*) FILTER (WHERE m.state = 'pending') AS pending,
       count(*) FILTER (WHERE m.state = 'delivered') AS delivered,
       count(*) FILTER (WHERE m.state = 'dead') AS dead
FROM webhook_endpoints w
LEFT JOIN webhook_messages m ON m.endpoint = w.id
WHERE $1::text IS NULL OR w.tenant = $1
GROUP BY w.id
ORDER BY w.tenant, w.id
