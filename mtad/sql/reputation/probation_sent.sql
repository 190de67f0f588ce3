-- Deliveries delivered for tenants on probation: $1[i] had $2[i] more. Returns the
-- tenants on probation and their count.
UPDATE tenant_states t SET probation_sent = t.probation_sent + n.sent
FROM unnest($1::text[], $2::int[]) AS n (tenant, sent)
WHERE t.tenant = n.tenant AND t.probation
RETURNING t.tenant, t.probation_sent
