-- The suppressions of tenant $1 (NULL: every list, the global one included) with
-- reason $2 (NULL: any), expired ones included (expires_at says), in order.
SELECT tenant, address, reason, detail, event, delivery, created_at, expires_at
FROM suppressions
WHERE ($1::text IS NULL OR tenant = $1) AND ($2::text IS NULL OR reason = $2)
ORDER BY tenant, address
