-- Cancel campaign $2 of tenant $1 at $3 for reason $4, with a campaign_cancelled
-- event (a cancelled one stays as it was). Returns its id and whether it was
-- cancelled already; no row: no such campaign.
WITH found AS (
    SELECT id, state FROM campaigns WHERE tenant = $1 AND name = $2 FOR UPDATE
),
cancelled AS (
    UPDATE campaigns c SET state = 'cancelled', reason = $4, changed_at = $3
    FROM found f WHERE c.id = f.id AND f.state <> 'cancelled'
    RETURNING c.id
),
logged AS (
    INSERT INTO events (at, kind, tenant, data)
    SELECT $3, 'campaign_cancelled', $1, jsonb_build_object('campaign', $2::text, 'reason', $4::text)
    FROM cancelled
)
SELECT id, state = 'cancelled' AS already FROM found
