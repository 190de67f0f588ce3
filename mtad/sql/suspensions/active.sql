-- The suspensions and reroutes in force at $1.
SELECT 'suspension' AS what, kind, key, NULL::text AS pool, reason, created_at, until
FROM suspensions WHERE until IS NULL OR until > $1
UNION ALL
SELECT 'reroute', 'provider', provider, pool, reason, created_at, until
FROM reroutes WHERE until IS NULL OR until > $1
ORDER BY what, kind, key
