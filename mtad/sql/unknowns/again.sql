-- The sends held unknown $1 were not found sent by $2, when their wait was over:
-- queued, due now, to be sent again, each with a 'requeued' event whose data is $3;
-- but those of a cancelled campaign are cancelled (reason admin), each with its
-- tenant's 'cancelled' event (as campaigns/cancel_rest.sql writes them). Their
-- campaigns are locked FOR SHARE (in id order, as the accept does): a cancel waits
-- for this and cancels what it queued, or this sees the cancel. Returns the ids
-- changed.
WITH campaign AS MATERIALIZED (
    SELECT c.id, c.state FROM campaigns c
    WHERE c.id IN (SELECT d.campaign FROM deliveries d WHERE d.id = ANY($1::bigint[]) AND d.campaign IS NOT NULL)
    ORDER BY c.id
    FOR SHARE
),
changed AS (
    UPDATE deliveries d
    SET state = f.state, reason = CASE WHEN f.state = 'cancelled' THEN 'admin' ELSE d.reason END,
        next_attempt_at = $2, updated_at = $2
    FROM (SELECT d.id,
                 CASE WHEN EXISTS (SELECT 1 FROM campaign c WHERE c.id = d.campaign AND c.state = 'cancelled')
                      THEN 'cancelled' ELSE 'queued' END::delivery_state AS state
          FROM deliveries d WHERE d.id = ANY($1::bigint[])) f
    WHERE d.id = f.id AND d.state::text = 'unknown'  -- as text: see leases/record_query.sql
    RETURNING d.id, d.message, d.recipient, d.state::text AS state
),
gone AS (
    DELETE FROM unknown_sends u USING changed WHERE u.delivery = changed.id
),
logged AS (
    INSERT INTO events (at, kind, message, delivery, tenant, data)
    SELECT $2, CASE WHEN state = 'cancelled' THEN 'cancelled' ELSE 'requeued' END, message, id,
           CASE WHEN state = 'cancelled' THEN (SELECT m.tenant FROM messages m WHERE m.id = changed.message) END,
           CASE WHEN state = 'cancelled' THEN jsonb_build_object('recipient', recipient, 'reason', 'campaign_cancelled')
                ELSE $3::jsonb END
    FROM changed
)
SELECT coalesce(array_agg(id), '{}') AS ids FROM changed
