-- Tenant $1 is off probation at $2, having sent $3 deliveries within the rates,
-- with a tenant_graduated event. No row: not on probation.
WITH graduated AS (
    UPDATE tenant_states t SET probation = false, graduated_at = $2
    WHERE t.tenant = $1 AND t.probation
    RETURNING t.tenant, t.probation_since
),
logged AS (
    INSERT INTO events (at, kind, tenant, data)
    SELECT $2, 'tenant_graduated', $1, jsonb_build_object('sent', $3::bigint, 'since', g.probation_since)
    FROM graduated g
)
SELECT tenant FROM graduated
