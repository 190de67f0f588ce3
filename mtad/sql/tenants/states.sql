-- The tenants paused or on probation now: what submission and delivery heed.
SELECT tenant, paused_by, paused_reason, probation
FROM tenant_states WHERE paused_at IS NOT NULL OR probation
