-- Put tenant $1 on probation at $2 ($3 true) or take it off ($3 false); the count
-- of its deliveries starts again. Returns the tenant's row.
INSERT INTO tenant_states AS t (tenant, probation, probation_since) VALUES ($1, $3::boolean, CASE WHEN $3 THEN $2::timestamptz END)
ON CONFLICT (tenant) DO UPDATE
SET probation = $3, probation_since = CASE WHEN $3 THEN $2::timestamptz END, probation_sent = 0,
    graduated_at = CASE WHEN NOT $3 AND t.probation THEN $2::timestamptz ELSE t.graduated_at END
RETURNING t.tenant, t.probation
