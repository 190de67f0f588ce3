-- Forget the soft bounces of address $2 for tenant $1 up to $3 (arrays): they
-- suppressed it, and its count starts again.
DELETE FROM soft_bounces s
USING unnest($1::text[], $2::text[], $3::timestamptz[]) AS g(tenant, address, at)
WHERE s.tenant = g.tenant AND s.address = g.address AND s.at <= g.at
