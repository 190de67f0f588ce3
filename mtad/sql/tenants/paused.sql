-- The paused tenants (the default tenant too, which has no row in tenants), the
-- longest paused first.
SELECT tenant, paused_at, paused_by, paused_reason
FROM tenant_states
WHERE paused_at IS NOT NULL
ORDER BY paused_at, tenant
