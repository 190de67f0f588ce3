-- What campaign $1 has not sent (queued, deferred, held) is cancelled at $2 (reason
-- admin), each with its event. Returns how many.
WITH cancelled AS (
    UPDATE deliveries d
    SET state = 'cancelled', reason = 'admin', lease_owner = NULL, lease_expires_at = NULL, updated_at = $2
    FROM messages m
    WHERE m.campaign = $1 AND d.message = m.id AND d.state IN ('queued', 'deferred', 'held')
    RETURNING d.id, d.message, d.recipient, m.tenant
),
logged AS (
    INSERT INTO events (at, kind, message, delivery, tenant, data)
    SELECT $2, 'cancelled', message, id, tenant,
           jsonb_build_object('recipient', recipient, 'reason', 'campaign_cancelled')
    FROM cancelled
)
SELECT count(*) FROM cancelled
