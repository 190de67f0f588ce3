-- Node $1 starts again, and its previous life is gone: every delivery still leased
-- to it goes back to the queue, due at $2 at the latest, each with a `requeued`
-- event (maybe_sent when an attempt id is set: it may have gone out). A mailbox
-- send in flight on such a lease counts as settled at $2 (it keeps its slot), and
-- its source address leases are gone (a turn they held parks at the next take).
-- Returns how many. Through the lease-expiry index (state = 'leased').
WITH reclaimed AS (
    UPDATE deliveries d
    SET state = 'queued', reason = 'reclaimed', lease_owner = NULL, lease_expires_at = NULL,
        next_attempt_at = least(d.next_attempt_at, $2), updated_at = $2
    WHERE d.state = 'leased' AND d.lease_owner = $1
    RETURNING d.id, d.message, d.attempt_id
),
logged AS (
    INSERT INTO events (at, kind, message, delivery, data)
    SELECT $2, 'requeued', message, id,
           jsonb_build_object('reason', 'reclaimed', 'maybe_sent', attempt_id IS NOT NULL)
    FROM reclaimed
),
settled AS (
    UPDATE account_reservations r SET settled_at = $2
    FROM reclaimed
    WHERE r.delivery = reclaimed.id AND r.settled_at IS NULL
),
sources AS (
    DELETE FROM source_leases WHERE node = $1
)
SELECT count(*) FROM reclaimed
