-- Pause tenant $1 at $4, by $2 ('auto' or 'operator') for reason $3: its queued and
-- deferred deliveries wait (due at infinity; a leased one is held back before its
-- attempt, leases/begin.sql), with a tenant_paused event. Returns the deliveries
-- held now; no row when the tenant was paused already.
WITH paused AS (
    INSERT INTO tenant_states AS t (tenant, paused_at, paused_by, paused_reason) VALUES ($1, $4, $2, $3)
    ON CONFLICT (tenant) DO UPDATE SET paused_at = $4, paused_by = $2, paused_reason = $3
    WHERE t.paused_at IS NULL
    RETURNING t.tenant
),
held AS (
    UPDATE deliveries d SET next_attempt_at = 'infinity', updated_at = $4
    FROM messages m
    WHERE EXISTS (SELECT 1 FROM paused) AND m.id = d.message AND m.tenant = $1
      AND d.state IN ('queued', 'deferred')
    RETURNING d.id
),
logged AS (
    INSERT INTO events (at, kind, tenant, data)
    SELECT $4, 'tenant_paused', $1,
           jsonb_build_object('by', $2::text, 'reason', $3::text, 'held', (SELECT count(*) FROM held)) || $5::jsonb
    FROM paused
)
SELECT (SELECT count(*) FROM held) AS held FROM paused
