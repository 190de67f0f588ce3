-- Leases that expired (their node died or stalled) go back to the queue, each with
-- a `requeued` event; a set attempt id means the message may already have been sent.
-- A mailbox send still in flight on such a lease counts as settled when the lease
-- ended: it keeps its slot, and the mailbox's gap runs from then.
WITH expired AS (
    SELECT id, lease_expires_at FROM deliveries
    WHERE state = 'leased' AND lease_expires_at < $1
    ORDER BY lease_expires_at
    LIMIT $2
    FOR UPDATE SKIP LOCKED
),
requeued AS (
    UPDATE deliveries d
    SET state = 'queued', reason = 'lease_expired', lease_owner = NULL, lease_expires_at = NULL,
        updated_at = $1
    FROM expired
    WHERE d.id = expired.id
    RETURNING d.id, d.message, d.attempt_id
),
logged AS (
    INSERT INTO events (at, kind, message, delivery, data)
    SELECT $1, 'requeued', message, id,
           jsonb_build_object('reason', 'lease_expired', 'maybe_sent', attempt_id IS NOT NULL)
    FROM requeued
),
settled AS (
    UPDATE account_reservations r SET settled_at = expired.lease_expires_at
    FROM expired
    WHERE r.delivery = expired.id AND r.settled_at IS NULL
)
SELECT count(*) FROM requeued
