-- Resume paused campaign $2 of tenant $1 at $3, with a campaign_resumed event. Its
-- held deliveries are released by campaigns/unhold.sql, a statement of its own in
-- the same transaction: it must see what a begin.sql that held this row's lock
-- committed meanwhile. No row: not paused.
WITH resumed AS (
    UPDATE campaigns SET state = 'active', reason = NULL, changed_at = $3
    WHERE tenant = $1 AND name = $2 AND state = 'paused'
    RETURNING id
),
logged AS (
    INSERT INTO events (at, kind, tenant, data)
    SELECT $3, 'campaign_resumed', $1, jsonb_build_object('campaign', $2::text) FROM resumed
)
SELECT id FROM resumed
