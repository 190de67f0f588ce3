-- The durable accept of a batch of messages, in one statement (one round trip,
-- one transaction, one WAL flush). Claims the idempotency keys, then inserts
-- every message that owns its key (or has none), one delivery per recipient and
-- a `received` event. A recipient on its tenant's suppression list or the global
-- one (tenant ''), in lower case and not expired, gets a delivery that is
-- cancelled at once (reason suppressed, with its event). Returns, for each message
-- in input order, the message that owns it: itself, or the earlier message its
-- key belongs to (a duplicate).
-- Keys must be unique within a batch (mtad folds duplicates before writing).
--
-- Every key comes back from the claim with its owner: new and expired keys are
-- taken by this batch, live ones keep theirs (rewritten unchanged). Only the
-- unique index is consulted: no plan that statistics from an empty table could
-- turn into a sequential scan (a drained queue followed by a burst).
--
-- $1 ids, $2 tenants, $3 senders, $4 Message-IDs, $5 keys (NULL: none), $6 bodies,
-- $7 smtputf8, $8 client addresses, $9 received at, $10 priorities, $11 source IP
-- pools (NULL: not chosen), $12 account pools (NULL: not chosen), $13 recipient
-- counts; $14 for each recipient the 1-based index of its message, $15 recipients,
-- $16 their domains; $17 expiry of new keys, $18 now; $19 the node to lease the new
-- deliveries to at once (the fast path to its ready queues) and $20 until when, or
-- NULL and NULL to leave them queued for any node; $21 true: the caller wakes the
-- event consumers and the delivering nodes after the commit (sql/events/wake.sql,
-- sql/leases/notify_due.sql), no NOTIFY is made here.
--
-- Returns the owners, and the id, message and recipient of every new delivery to send.
-- New queued deliveries NOTIFY mtad_due, so that delivering nodes lease them at once
-- (`queued` says whether there are, for a caller that wakes them itself).
WITH quiet AS (
    SELECT set_config('mtad.wake_after_commit', CASE WHEN $21::boolean THEN 'on' ELSE 'off' END, true)
),
input AS (
    SELECT *
    FROM unnest($1::uuid[], $2::text[], $3::text[], $4::text[], $5::text[], $6::bytea[],
                $7::boolean[], $8::text[], $9::timestamptz[], $10::smallint[], $11::text[], $12::text[],
                $13::integer[])
         WITH ORDINALITY
         AS m (id, tenant, sender, message_id, key, body, smtputf8, client, received, priority, pool,
               account_pool, rcpts, ord)
),
claimed AS (
    INSERT INTO idempotency_keys AS k (tenant, key, message, expires_at)
    SELECT tenant, key, id, $17::timestamptz FROM input WHERE key IS NOT NULL
    ON CONFLICT (tenant, key) DO UPDATE
        SET message = CASE WHEN k.expires_at <= $18::timestamptz THEN excluded.message ELSE k.message END,
            expires_at = CASE WHEN k.expires_at <= $18::timestamptz THEN excluded.expires_at ELSE k.expires_at END
    RETURNING k.tenant, k.key, k.message
),
owned AS (
    SELECT input.*, coalesce(claimed.message, input.id) AS owner
    FROM input LEFT JOIN claimed ON claimed.tenant = input.tenant AND claimed.key = input.key
),
new_messages AS (
    INSERT INTO messages (id, tenant, sender, message_id, idempotency_key, size, body,
                          smtputf8, client_address, received_at, pool, account_pool)
    SELECT id, tenant, sender, message_id, key, octet_length(body), body, smtputf8, client, received, pool,
           account_pool
    FROM owned WHERE owner = id
),
new_deliveries AS (
    INSERT INTO deliveries (message, recipient, domain, priority, next_attempt_at, created_at, updated_at,
                            state, reason, lease_owner, lease_expires_at)
    SELECT o.id, r.rcpt, r.domain, o.priority, o.received, o.received, o.received,
           CASE WHEN s.hit THEN 'cancelled'
                WHEN $19::text IS NULL THEN 'queued' ELSE 'leased' END::delivery_state,
           CASE WHEN s.hit THEN 'suppressed' END::delivery_reason,
           CASE WHEN s.hit IS NULL THEN $19::text END,
           CASE WHEN s.hit IS NULL THEN $20::timestamptz END
    FROM unnest($14::integer[], $15::text[], $16::text[]) AS r (ord, rcpt, domain)
    JOIN owned o ON o.ord = r.ord
    LEFT JOIN LATERAL (
        SELECT true AS hit FROM suppressions s
        WHERE s.tenant IN (o.tenant, '') AND s.address = lower(r.rcpt)
          AND (s.expires_at IS NULL OR s.expires_at > $18::timestamptz)
        LIMIT 1
    ) s ON true
    WHERE o.owner = o.id
    RETURNING id, message, recipient, state
),
new_events AS (
    INSERT INTO events (at, kind, message, tenant, data)
    SELECT received, 'received', id, tenant,
           jsonb_build_object('sender', sender, 'recipients', rcpts, 'size', octet_length(body),
                              'message_id', message_id, 'client', client)
    FROM owned CROSS JOIN quiet WHERE owner = id
),
suppressed AS (
    INSERT INTO events (at, kind, message, delivery, tenant, data)
    SELECT $18::timestamptz, 'cancelled', d.message, d.id, o.tenant,
           jsonb_build_object('recipient', d.recipient, 'reason', 'suppressed')
    FROM new_deliveries d JOIN owned o ON o.id = d.message CROSS JOIN quiet
    WHERE d.state = 'cancelled'
)
SELECT (SELECT array_agg(owner ORDER BY ord) FROM owned) AS owners,
       -- Deliveries left queued wake the delivering nodes (sent at COMMIT).
       (SELECT pg_notify('mtad_due', '') WHERE $19::text IS NULL AND NOT $21::boolean
                                           AND EXISTS (SELECT 1 FROM new_deliveries WHERE state = 'queued'))
           AS notified,
       EXISTS (SELECT 1 FROM new_deliveries WHERE state = 'queued') AS queued,
       (SELECT array_agg(id ORDER BY id) FROM new_deliveries WHERE state = 'leased') AS delivery_ids,
       (SELECT array_agg(message ORDER BY id) FROM new_deliveries WHERE state = 'leased') AS delivery_messages,
       (SELECT array_agg(recipient ORDER BY id) FROM new_deliveries WHERE state = 'leased') AS delivery_recipients
