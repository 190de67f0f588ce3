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
-- sql/leases/notify_due.sql), no NOTIFY is made here. $22 the campaign each message
-- names (NULL: none), made for its tenant when it does not exist yet with $23
-- max_per_hour and $24 max_per_day (its tenant's defaults; NULL: none): a paused
-- campaign's deliveries wait (due at infinity), a cancelled one's are cancelled.
-- The campaigns named are locked FOR SHARE, in id order: a pause or cancel waits for
-- this batch (and then sees its deliveries), or this batch for it (and sees its state).
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
                $13::integer[], $22::text[], $23::integer[], $24::integer[])
         WITH ORDINALITY
         AS m (id, tenant, sender, message_id, key, body, smtputf8, client, received, priority, pool,
               account_pool, rcpts, campaign, per_hour, per_day, ord)
),
named AS (  -- a tenant's messages carry the same defaults
    SELECT tenant, campaign AS name, min(per_hour) AS per_hour, min(per_day) AS per_day
    FROM input WHERE campaign IS NOT NULL GROUP BY 1, 2
),
known AS MATERIALIZED (  -- FOR SHARE returns the state a cancel or pause committed while this waited
    SELECT c.id, c.tenant, c.name, c.state FROM campaigns c JOIN named n ON n.tenant = c.tenant AND n.name = c.name
    ORDER BY c.id
    FOR SHARE OF c
),
made AS (  -- one made meanwhile by another batch is returned by the update, once it is committed
    INSERT INTO campaigns AS c (tenant, name, created_at, changed_at, max_per_hour, max_per_day)
    SELECT n.tenant, n.name, $18::timestamptz, $18::timestamptz, n.per_hour, n.per_day FROM named n
    WHERE NOT EXISTS (SELECT 1 FROM known k WHERE k.tenant = n.tenant AND k.name = n.name)
    ORDER BY n.tenant, n.name
    ON CONFLICT (tenant, name) DO UPDATE SET name = excluded.name
    RETURNING c.id, c.tenant, c.name, c.state
),
campaign AS (
    SELECT * FROM known UNION ALL SELECT * FROM made
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
    SELECT input.*, coalesce(claimed.message, input.id) AS owner, c.id AS campaign_id, c.state AS campaign_state
    FROM input LEFT JOIN claimed ON claimed.tenant = input.tenant AND claimed.key = input.key
    LEFT JOIN campaign c ON c.tenant = input.tenant AND c.name = input.campaign
),
new_messages AS (
    INSERT INTO messages (id, tenant, sender, message_id, idempotency_key, size, body,
                          smtputf8, client_address, received_at, pool, account_pool, campaign)
    SELECT id, tenant, sender, message_id, key, octet_length(body), body, smtputf8, client, received, pool,
           account_pool, campaign_id
    FROM owned WHERE owner = id
),
new_deliveries AS (
    INSERT INTO deliveries (message, recipient, domain, priority, next_attempt_at, created_at, updated_at,
                            state, reason, lease_owner, lease_expires_at, campaign)
    SELECT o.id, r.rcpt, r.domain, o.priority,
           CASE WHEN o.campaign_state = 'paused' THEN 'infinity' ELSE o.received END, o.received, o.received,
           f.state, f.reason,
           CASE WHEN f.state = 'leased' THEN $19::text END,
           CASE WHEN f.state = 'leased' THEN $20::timestamptz END,
           o.campaign_id
    FROM unnest($14::integer[], $15::text[], $16::text[]) AS r (ord, rcpt, domain)
    JOIN owned o ON o.ord = r.ord
    LEFT JOIN LATERAL (
        SELECT true AS hit FROM suppressions s
        WHERE s.tenant IN (o.tenant, '') AND s.address = lower(r.rcpt)
          AND (s.expires_at IS NULL OR s.expires_at > $18::timestamptz)
        LIMIT 1
    ) s ON true
    CROSS JOIN LATERAL (
        SELECT CASE WHEN s.hit OR o.campaign_state = 'cancelled' THEN 'cancelled'
                    WHEN $19::text IS NULL OR o.campaign_state = 'paused' THEN 'queued'
                    ELSE 'leased' END::delivery_state AS state,
               CASE WHEN s.hit THEN 'suppressed'
                    WHEN o.campaign_state = 'cancelled' THEN 'admin' END::delivery_reason AS reason
    ) f
    WHERE o.owner = o.id
    RETURNING id, message, recipient, state, reason
),
new_events AS (
    INSERT INTO events (at, kind, message, tenant, data)
    SELECT received, 'received', id, tenant,
           jsonb_build_object('sender', sender, 'recipients', rcpts, 'size', octet_length(body),
                              'message_id', message_id, 'client', client)
           || CASE WHEN campaign IS NOT NULL THEN jsonb_build_object('campaign', campaign) ELSE '{}' END
    FROM owned CROSS JOIN quiet WHERE owner = id
),
suppressed AS (
    INSERT INTO events (at, kind, message, delivery, tenant, data)
    SELECT $18::timestamptz, 'cancelled', d.message, d.id, o.tenant,
           jsonb_build_object('recipient', d.recipient,
                              'reason', CASE WHEN d.reason = 'admin' THEN 'campaign_cancelled' ELSE 'suppressed' END)
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
