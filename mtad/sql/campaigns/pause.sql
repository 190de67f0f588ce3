-- Pause campaign $2 of tenant $1 at $3 for reason $4: its queued and deferred
-- deliveries wait (due at infinity; a leased one is held back before its attempt,
-- leases/begin.sql), with a campaign_paused event. Returns the deliveries held now;
-- no row when it was not active.
WITH paused AS (
    UPDATE campaigns SET state = 'paused', reason = $4, changed_at = $3
    WHERE tenant = $1 AND name = $2 AND state = 'active'
    RETURNING id
),
held AS (
    UPDATE deliveries d SET next_attempt_at = 'infinity', updated_at = $3
    FROM messages m, paused p
    WHERE m.campaign = p.id AND d.message = m.id AND d.state IN ('queued', 'deferred')
    RETURNING d.id
),
logged AS (
    INSERT INTO events (at, kind, tenant, data)
    SELECT $3, 'campaign_paused', $1,
           jsonb_build_object('campaign', $2::text, 'reason', $4::text, 'held', (SELECT count(*) FROM held))
    FROM paused
)
SELECT (SELECT count(*) FROM held) AS held FROM paused
