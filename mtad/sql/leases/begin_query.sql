-- The statement of mtad_begin (sql/functions/mtad_begin.sql), written before
-- DATA: each delivery in $2 is about to be sent by node $1 as
-- attempt $3[i] to group $4[i], for tenant $6[i], from source pool $7[i] (NULL:
-- none) and address $8[i] (NULL: the system's), through account $9[i] (NULL: to
-- MX). What an operator forbade since the node looked is not sent, whatever the
-- node's view of it:
--  - a recipient on its tenant's suppression list or the global one (not expired
--    at $5): cancelled now, reason suppressed;
--  - a paused tenant's, or a paused or cancelled campaign's: queued again, due at
--    infinity (until tenants/unhold.sql, campaigns/unhold.sql; a cancel takes it);
--  - a suspended provider group's, tenant's or pool's: set aside as
--    suspensions/hold.sql does, due when the suspension ends;
--  - one from a suspended address, through a disabled account, or from another
--    pool than its group's reroute: queued again, due now, to leave another way;
--  - one to MX that would take its campaign over its max_per_hour or max_per_day:
--    set aside until the next hour or day (UTC). The sends begun to MX of a campaign
--    with limits are counted here, under its row's lock (FOR UPDATE, in id order);
--    a relayed one's slot was taken with its account's reservation (mtad_reserve).
-- Each with its event. The paused tenants', stopped campaigns' and the suspensions'
-- rows are locked FOR SHARE, so a resume waits for this statement or this one for
-- the resume.
-- Returns the ids still leased to the node (a lost lease must not be sent), each
-- with what became of it: 'begun', 'suppressed', 'held', 'set_aside' or 'limited'
-- (set aside for its campaign's limits). Found by primary key, no join (see
-- record_query.sql).
WITH paused AS MATERIALIZED (
    SELECT t.tenant FROM tenant_states t
    WHERE t.tenant = ANY($6::text[]) AND t.paused_at IS NOT NULL
    FOR SHARE
),
stopped AS MATERIALIZED (
    SELECT c.id, c.state FROM campaigns c
    WHERE c.state <> 'active'
      AND c.id IN (SELECT d.campaign FROM deliveries d WHERE d.id = ANY($2::bigint[]) AND d.campaign IS NOT NULL)
    FOR SHARE OF c
),
to_mx AS MATERIALIZED (  -- the deliveries not relayed
    SELECT a.id FROM unnest($2::bigint[], $9::bigint[]) AS a (id, account) WHERE a.account IS NULL
),
limited AS MATERIALIZED (
    SELECT c.id, c.max_per_hour, c.max_per_day FROM campaigns c
    WHERE (c.max_per_hour IS NOT NULL OR c.max_per_day IS NOT NULL) AND c.state = 'active'
      AND c.id IN (SELECT d.campaign FROM deliveries d
                   WHERE d.id = ANY(ARRAY(SELECT id FROM to_mx)) AND d.campaign IS NOT NULL)
    ORDER BY c.id
    FOR UPDATE OF c
),
sent AS MATERIALIZED (
    SELECT l.id, l.max_per_hour, l.max_per_day,
           coalesce(sum(s.sends) FILTER (WHERE s.hour = date_trunc('hour', $5::timestamptz, 'UTC')), 0) AS hour,
           coalesce(sum(s.sends), 0) AS day
    FROM limited l
    LEFT JOIN campaign_sends s ON s.campaign = l.id AND s.hour >= date_trunc('day', $5::timestamptz, 'UTC')
    GROUP BY l.id, l.max_per_hour, l.max_per_day
),
over AS MATERIALIZED (
    SELECT r.id,
           CASE WHEN s.day + r.nth > s.max_per_day
                THEN jsonb_build_object('reason', 'campaign_limit', 'limit', 'max_per_day',
                                        'until', date_trunc('day', $5::timestamptz, 'UTC') + interval '1 day')
                ELSE jsonb_build_object('reason', 'campaign_limit', 'limit', 'max_per_hour',
                                        'until', date_trunc('hour', $5::timestamptz, 'UTC') + interval '1 hour')
           END AS why
    FROM (SELECT d.id, d.campaign, row_number() OVER (PARTITION BY d.campaign ORDER BY d.id) AS nth
          FROM deliveries d WHERE d.id = ANY(ARRAY(SELECT id FROM to_mx)) AND d.campaign IN (SELECT id FROM sent)) r
    JOIN sent s ON s.id = r.campaign
    WHERE s.day + r.nth > s.max_per_day OR s.hour + r.nth > s.max_per_hour
),
standing AS MATERIALIZED (
    SELECT s.kind, s.key, s.reason, s.until FROM suspensions s
    WHERE (s.until IS NULL OR s.until > $5)
      AND ((s.kind = 'provider' AND s.key = ANY($4::text[])) OR (s.kind = 'tenant' AND s.key = ANY($6::text[]))
           OR (s.kind = 'pool' AND s.key = ANY($7::text[])) OR (s.kind = 'source' AND s.key = ANY($8::text[])))
    FOR SHARE
),
rerouted AS MATERIALIZED (
    SELECT r.provider, r.pool FROM reroutes r
    WHERE r.provider = ANY($4::text[]) AND (r.until IS NULL OR r.until > $5)
),
disabled AS MATERIALIZED (
    SELECT a.id, a.name FROM accounts a
    WHERE a.id = ANY($9::bigint[]) AND a.state = 'disabled' AND (a.state_until IS NULL OR a.state_until > $5)
),
mine AS (
    SELECT d.id, d.message, d.recipient, x.tenant, x.grp,
           EXISTS (
               SELECT 1 FROM suppressions s
               WHERE s.tenant IN (x.tenant, '') AND s.address = lower(d.recipient)
                 AND (s.expires_at IS NULL OR s.expires_at > $5)
           ) AS suppressed,
           (x.tenant IN (SELECT tenant FROM paused)
            OR coalesce(d.campaign IN (SELECT id FROM stopped), false)) AS paused,
           (SELECT 'campaign_' || s.state::text FROM stopped s WHERE s.id = d.campaign) AS campaign_stopped,
           coalesce((SELECT jsonb_build_object('reason', 'suspended', 'suspended', s.kind, 'key', s.key,
                                               'why', s.reason, 'until', s.until)
                     FROM standing s
                     WHERE (s.kind = 'provider' AND s.key = x.grp) OR (s.kind = 'tenant' AND s.key = x.tenant)
                        OR (s.kind = 'pool' AND s.key = x.pool)
                     ORDER BY s.kind LIMIT 1),
                    (SELECT o.why FROM over o WHERE o.id = d.id)) AS aside,
           CASE
               WHEN x.source IN (SELECT s.key FROM standing s WHERE s.kind = 'source') THEN
                   jsonb_build_object('reason', 'suspended', 'suspended', 'source', 'key', x.source, 'again', 'now')
               WHEN x.account IN (SELECT id FROM disabled) THEN
                   jsonb_build_object('reason', 'account_disabled', 'again', 'now',
                                      'account', (SELECT name FROM disabled WHERE id = x.account))
               WHEN EXISTS (SELECT 1 FROM rerouted r WHERE r.provider = x.grp AND r.pool IS DISTINCT FROM x.pool) THEN
                   jsonb_build_object('reason', 'rerouted', 'again', 'now',
                                      'pool', (SELECT r.pool FROM rerouted r WHERE r.provider = x.grp))
           END AS again
    FROM deliveries d
    CROSS JOIN LATERAL (SELECT array_position($2::bigint[], d.id) AS i) p
    CROSS JOIN LATERAL (
        SELECT ($6::text[])[p.i] AS tenant, ($4::text[])[p.i] AS grp, ($7::text[])[p.i] AS pool,
               ($8::text[])[p.i] AS source, ($9::bigint[])[p.i] AS account
    ) x
    WHERE d.id = ANY($2::bigint[]) AND d.state::text = 'leased' AND d.lease_owner = $1  -- state as text: see record_query.sql
),
begun AS (
    UPDATE deliveries d
    SET attempt_id = ($3::uuid[])[array_position($2::bigint[], d.id)],
        route_group = ($4::text[])[array_position($2::bigint[], d.id)],
        updated_at = $5
    WHERE d.id = ANY(ARRAY(SELECT id FROM mine
                           WHERE NOT suppressed AND NOT paused AND aside IS NULL AND again IS NULL))
      AND d.state::text = 'leased' AND d.lease_owner = $1
    RETURNING d.id, d.campaign
),
waiting AS (
    UPDATE deliveries d
    SET state = 'queued', reason = 'released', lease_owner = NULL, lease_expires_at = NULL,
        next_attempt_at = 'infinity', updated_at = $5
    WHERE d.id = ANY(ARRAY(SELECT id FROM mine WHERE paused AND NOT suppressed)) AND d.state::text = 'leased'
      AND d.lease_owner = $1
    RETURNING d.id, d.message
),
aside AS (
    UPDATE deliveries d
    SET state = 'queued', reason = 'released', lease_owner = NULL, lease_expires_at = NULL,
        next_attempt_at = coalesce((SELECT CASE WHEN m.aside IS NOT NULL
                                                THEN coalesce((m.aside->>'until')::timestamptz, 'infinity') END
                                    FROM mine m WHERE m.id = d.id), $5),
        route_group = ($4::text[])[array_position($2::bigint[], d.id)],
        updated_at = $5
    WHERE d.id = ANY(ARRAY(SELECT id FROM mine
                           WHERE NOT suppressed AND NOT paused AND (aside IS NOT NULL OR again IS NOT NULL)))
      AND d.state::text = 'leased' AND d.lease_owner = $1
    RETURNING d.id, d.message
),
cancelled AS (
    UPDATE deliveries d
    SET state = 'cancelled', reason = 'suppressed', lease_owner = NULL, lease_expires_at = NULL, updated_at = $5
    WHERE d.id = ANY(ARRAY(SELECT id FROM mine WHERE suppressed)) AND d.state::text = 'leased'
      AND d.lease_owner = $1
    RETURNING d.id, d.message, d.recipient
),
counted AS (
    INSERT INTO campaign_sends AS s (campaign, hour, sends)
    SELECT b.campaign, date_trunc('hour', $5::timestamptz, 'UTC'), count(*) FROM begun b
    WHERE b.campaign IN (SELECT id FROM limited) AND b.id = ANY(ARRAY(SELECT id FROM to_mx))
    GROUP BY b.campaign
    ON CONFLICT (campaign, hour) DO UPDATE SET sends = s.sends + excluded.sends
),
quiet AS (  -- the caller wakes the consumers after the commit when there are events (sql/events/wake.sql)
    SELECT set_config('mtad.wake_after_commit', 'on', true)
),
logged AS (
    INSERT INTO events (at, kind, message, delivery, tenant, data)
    SELECT $5, 'cancelled', c.message, c.id, h.tenant,
           jsonb_build_object('recipient', c.recipient, 'reason', 'suppressed', 'before_attempt', true)
    FROM cancelled c JOIN mine h ON h.id = c.id CROSS JOIN quiet
    UNION ALL
    SELECT $5, 'requeued', w.message, w.id, h.tenant,
           jsonb_build_object('reason', coalesce(h.campaign_stopped, 'tenant_paused'))
    FROM waiting w JOIN mine h ON h.id = w.id CROSS JOIN quiet
    UNION ALL
    SELECT $5, 'requeued', a.message, a.id, h.tenant, coalesce(h.aside, h.again) || '{"before_attempt": true}'
    FROM aside a JOIN mine h ON h.id = a.id CROSS JOIN quiet
)
SELECT id, 'begun' AS became FROM begun
UNION ALL
SELECT id, 'suppressed' FROM cancelled
UNION ALL
SELECT id, 'held' FROM waiting
UNION ALL
SELECT a.id, CASE WHEN h.again IS NULL AND h.aside->>'reason' = 'campaign_limit' THEN 'limited' ELSE 'set_aside' END
FROM aside a JOIN mine h ON h.id = a.id
