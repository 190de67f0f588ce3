-- One tenant's state (no row: active, never paused, not on probation).
SELECT tenant, paused_at, paused_by, paused_reason, resumed_at, probation, probation_since, probation_sent,
       graduated_at
FROM tenant_states WHERE tenant = $1
