-- Account pool $1 has no account able to send ($3 true) at $2: the active
-- campaigns with mail still to go through it pause themselves (pool_paused), each
-- with a campaign_paused event by "auto"; or it can send again ($3 false): those it
-- paused resume, with a campaign_resumed event. Their mail is not held: it waits
-- for the pool as all its mail does, and its next send finds the pool back. Returns
-- the names of the campaigns that changed.
WITH theirs AS (
    SELECT DISTINCT m.campaign AS id FROM messages m
    WHERE $3::boolean AND m.account_pool = $1 AND m.campaign IS NOT NULL
      AND EXISTS (SELECT 1 FROM deliveries d WHERE d.message = m.id AND d.state IN ('queued', 'deferred', 'leased'))
),
changed AS (
    UPDATE campaigns c SET pool_paused = CASE WHEN $3::boolean THEN $1 END, changed_at = $2
    WHERE CASE WHEN $3::boolean THEN c.id IN (SELECT id FROM theirs) AND c.state = 'active' AND c.pool_paused IS NULL
               ELSE c.pool_paused = $1 END
    RETURNING c.tenant, c.name
),
logged AS (
    INSERT INTO events (at, kind, tenant, data)
    SELECT $2, CASE WHEN $3::boolean THEN 'campaign_paused' ELSE 'campaign_resumed' END, tenant,
           jsonb_build_object('campaign', name, 'by', 'auto', 'account_pool', $1::text)
           || CASE WHEN $3::boolean THEN jsonb_build_object('reason', 'no account of pool ' || $1 || ' can send')
                   ELSE '{}' END
    FROM changed
)
SELECT coalesce(array_agg(name ORDER BY tenant, name), '{}') AS names FROM changed
