-- Every endpoint (of tenant $1, when not NULL), by tenant then id (never their
-- secrets), with how many of its events are pending, delivered (at the first attempt,
-- counted, and from the outbox while its rows are kept) and dead.
SELECT w.id, w.tenant, w.url, w.events, w.batch, w.previous_until, w.created_at,
       count(*) FILTER (WHERE m.state = 'pending') AS pending,
       count(*) FILTER (WHERE m.state = 'delivered')
           + coalesce((SELECT d.events FROM webhook_delivered d WHERE d.endpoint = w.id), 0) AS delivered,
       count(*) FILTER (WHERE m.state = 'dead') AS dead
FROM webhook_endpoints w
LEFT JOIN webhook_messages m ON m.endpoint = w.id
WHERE $1::text IS NULL OR w.tenant = $1
GROUP BY w.id
ORDER BY w.tenant, w.id
