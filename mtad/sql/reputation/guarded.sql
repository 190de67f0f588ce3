-- What the auto-pause reads of tenants $1 at $2: their state, and each window's
-- deliveries, hard bounces and complaints counted after they were last resumed.
SELECT k.tenant, t.paused_at IS NOT NULL AS paused, coalesce(t.probation, false) AS probation,
       coalesce(t.probation_sent, 0) AS probation_sent, w.*
FROM unnest($1::text[]) AS k (tenant)
LEFT JOIN tenant_states t ON t.tenant = k.tenant
CROSS JOIN LATERAL (
    SELECT coalesce(sum(c.delivered) FILTER (WHERE c.minute >= $2::timestamptz - interval '1 hour'), 0) AS delivered_1h,
           coalesce(sum(c.bounced) FILTER (WHERE c.minute >= $2::timestamptz - interval '1 hour'), 0) AS bounced_1h,
           coalesce(sum(c.complained) FILTER (WHERE c.minute >= $2::timestamptz - interval '1 hour'), 0) AS complained_1h,
           coalesce(sum(c.delivered), 0) AS delivered_24h, coalesce(sum(c.bounced), 0) AS bounced_24h,
           coalesce(sum(c.complained), 0) AS complained_24h
    FROM reputation_counts c
    WHERE c.scope = 'tenant' AND c.tenant = k.tenant AND c.key = k.tenant
      AND c.minute >= $2::timestamptz - interval '24 hours'
      AND (t.resumed_at IS NULL OR c.minute > t.resumed_at)
) AS w
