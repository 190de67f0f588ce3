-- The first CSV row of an import whose tenant is none: neither a tenant's row nor $1
-- (the default tenant, which needs none); no row: every tenant named is one.
SELECT i.line, i.tenant
FROM suppressions_import i
WHERE coalesce(i.tenant, '') NOT IN ('', $1) AND NOT EXISTS (SELECT 1 FROM tenants t WHERE t.name = i.tenant)
ORDER BY i.line
LIMIT 1
