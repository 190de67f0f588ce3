-- Resume tenant $1 at $2, by $3, with a tenant_resumed event; the auto-pause then
-- reads only what is counted from now on. Its held deliveries are released by
-- tenants/unhold.sql, a statement of its own in the same transaction: it must see
-- what a begin.sql that held this row's lock committed meanwhile. No row: not paused.
WITH resumed AS (
    UPDATE tenant_states t
    SET paused_at = NULL, paused_by = NULL, paused_reason = NULL, resumed_at = $2
    WHERE t.tenant = $1 AND t.paused_at IS NOT NULL
    RETURNING t.tenant
),
logged AS (
    INSERT INTO events (at, kind, tenant, data)
    SELECT $2, 'tenant_resumed', $1, jsonb_build_object('by', $3::text) FROM resumed
)
SELECT tenant FROM resumed
