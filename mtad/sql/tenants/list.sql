SELECT t.name, t.state::text AS state, t.password_hash IS NOT NULL AS has_password,
       s.paused_at IS NOT NULL AS paused, coalesce(s.probation, false) AS probation, t.created_at, t.updated_at
FROM tenants t LEFT JOIN tenant_states s ON s.tenant = t.name
ORDER BY t.name
