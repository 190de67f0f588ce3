-- Written before DATA: each delivery in $2 is about to be sent by node $1 as
-- attempt $3[i] to group $4[i], for tenant $6[i]. A delivery whose recipient is
-- on its tenant's suppression list or the global one (not expired at $5) is not
-- sent: it is cancelled now, reason suppressed, with its event. Returns the ids
-- still leased to the node (a lost lease must not be sent), each with whether it
-- was suppressed. Found by primary key, no join (see record.sql).
WITH held AS (
    SELECT d.id, d.message, d.recipient, ($6::text[])[array_position($2::bigint[], d.id)] AS tenant,
           EXISTS (
               SELECT 1 FROM suppressions s
               WHERE s.tenant IN (($6::text[])[array_position($2::bigint[], d.id)], '')
                 AND s.address = lower(d.recipient) AND (s.expires_at IS NULL OR s.expires_at > $5)
           ) AS suppressed
    FROM deliveries d
    WHERE d.id = ANY($2::bigint[]) AND d.state::text = 'leased' AND d.lease_owner = $1  -- state as text: see record.sql
),
begun AS (
    UPDATE deliveries d
    SET attempt_id = ($3::uuid[])[array_position($2::bigint[], d.id)],
        route_group = ($4::text[])[array_position($2::bigint[], d.id)],
        updated_at = $5
    WHERE d.id = ANY(ARRAY(SELECT id FROM held WHERE NOT suppressed)) AND d.state::text = 'leased'
      AND d.lease_owner = $1
    RETURNING d.id
),
cancelled AS (
    UPDATE deliveries d
    SET state = 'cancelled', reason = 'suppressed', lease_owner = NULL, lease_expires_at = NULL, updated_at = $5
    WHERE d.id = ANY(ARRAY(SELECT id FROM held WHERE suppressed)) AND d.state::text = 'leased'
      AND d.lease_owner = $1
    RETURNING d.id, d.message, d.recipient
),
logged AS (
    INSERT INTO events (at, kind, message, delivery, tenant, data)
    SELECT $5, 'cancelled', c.message, c.id, h.tenant,
           jsonb_build_object('recipient', c.recipient, 'reason', 'suppressed', 'before_attempt', true)
    FROM cancelled c JOIN held h ON h.id = c.id
)
SELECT id, false AS suppressed FROM begun
UNION ALL
SELECT id, true FROM cancelled
