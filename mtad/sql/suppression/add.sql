-- Suppress address $2 for tenant $1 ('' : every tenant) with reason $3, detail $4,
-- source event $5 and delivery $6, at $7 until $8 (NULL: never). An address already
-- suppressed keeps its row unless this reason is stronger: a complaint or an
-- unsubscribe is never replaced by a bounce or an expiring entry, a hard bounce
-- replaces a soft one, and an entry that has expired is replaced. Returns the row
-- as it stands.
INSERT INTO suppressions AS s (tenant, address, reason, detail, event, delivery, created_at, expires_at)
VALUES ($1, lower($2), $3, $4, $5, $6, $7, $8)
ON CONFLICT (tenant, address) DO UPDATE
SET reason = excluded.reason, detail = excluded.detail, event = excluded.event, delivery = excluded.delivery,
    created_at = excluded.created_at, expires_at = excluded.expires_at
WHERE (s.expires_at IS NOT NULL AND s.expires_at <= excluded.created_at)
   OR (s.reason IN ('hard_bounce', 'soft_bounce', 'manual') AND excluded.reason IN ('complaint', 'unsubscribe'))
   OR (s.reason = 'soft_bounce' AND excluded.reason = 'hard_bounce')
   OR (s.reason = excluded.reason AND s.expires_at IS NOT NULL
       AND (excluded.expires_at IS NULL OR excluded.expires_at > s.expires_at))
RETURNING tenant, address, reason, detail, event, delivery, created_at, expires_at
