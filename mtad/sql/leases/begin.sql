-- Written before DATA: each delivery in $2 is about to be sent by node $1 as
-- attempt $3[i] to group $4[i], for tenant $6[i]. A delivery whose recipient is
-- on its tenant's suppression list or the global one (not expired at $5) is not
-- sent: it is cancelled now, reason suppressed, with its event. A delivery of a
-- paused tenant is not sent either: it is queued again, due at infinity (until
-- tenants/unhold.sql), with a requeued event; the paused tenants' rows are locked
-- FOR SHARE, so a resume waits for this statement or this one for the resume.
-- Returns the ids still leased to the node (a lost lease must not be sent), each
-- with what became of it: 'begun', 'suppressed' or 'held'. Found by primary key,
-- no join (see record.sql).
WITH paused AS MATERIALIZED (
    SELECT t.tenant FROM tenant_states t
    WHERE t.tenant = ANY($6::text[]) AND t.paused_at IS NOT NULL
    FOR SHARE
),
mine AS (
    SELECT d.id, d.message, d.recipient, ($6::text[])[array_position($2::bigint[], d.id)] AS tenant,
           EXISTS (
               SELECT 1 FROM suppressions s
               WHERE s.tenant IN (($6::text[])[array_position($2::bigint[], d.id)], '')
                 AND s.address = lower(d.recipient) AND (s.expires_at IS NULL OR s.expires_at > $5)
           ) AS suppressed,
           ($6::text[])[array_position($2::bigint[], d.id)] IN (SELECT tenant FROM paused) AS paused
    FROM deliveries d
    WHERE d.id = ANY($2::bigint[]) AND d.state::text = 'leased' AND d.lease_owner = $1  -- state as text: see record.sql
),
begun AS (
    UPDATE deliveries d
    SET attempt_id = ($3::uuid[])[array_position($2::bigint[], d.id)],
        route_group = ($4::text[])[array_position($2::bigint[], d.id)],
        updated_at = $5
    WHERE d.id = ANY(ARRAY(SELECT id FROM mine WHERE NOT suppressed AND NOT paused)) AND d.state::text = 'leased'
      AND d.lease_owner = $1
    RETURNING d.id
),
waiting AS (
    UPDATE deliveries d
    SET state = 'queued', reason = 'released', lease_owner = NULL, lease_expires_at = NULL,
        next_attempt_at = 'infinity', updated_at = $5
    WHERE d.id = ANY(ARRAY(SELECT id FROM mine WHERE paused AND NOT suppressed)) AND d.state::text = 'leased'
      AND d.lease_owner = $1
    RETURNING d.id, d.message
),
cancelled AS (
    UPDATE deliveries d
    SET state = 'cancelled', reason = 'suppressed', lease_owner = NULL, lease_expires_at = NULL, updated_at = $5
    WHERE d.id = ANY(ARRAY(SELECT id FROM mine WHERE suppressed)) AND d.state::text = 'leased'
      AND d.lease_owner = $1
    RETURNING d.id, d.message, d.recipient
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
    SELECT $5, 'requeued', w.message, w.id, h.tenant, '{"reason": "tenant_paused"}'::jsonb
    FROM waiting w JOIN mine h ON h.id = w.id CROSS JOIN quiet
)
SELECT id, 'begun' AS became FROM begun
UNION ALL
SELECT id, 'suppressed' FROM cancelled
UNION ALL
SELECT id, 'held' FROM waiting
