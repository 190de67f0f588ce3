-- An operator's action $12 on one batch: of the deliveries after id $8 that match
-- the filters (queue/match.sql) and are in one of the states $10, the first $9
-- by id move to state $11 (reason admin; due at $13 when queued again), each with
-- its event. A leased one is taken only while its attempt has not begun (no attempt
-- id): its node's begin then finds it no longer leased and never sends it. Locks
-- only the batch's rows, for one statement. Returns the last id looked at (NULL:
-- none left), the ids changed and how many were in each state before.
WITH batch AS (
    SELECT d.id FROM deliveries d
    JOIN messages m ON m.id = d.message
    WHERE d.id > $8 AND d.state::text = ANY($10::text[])
      AND
\include queue/match
    ORDER BY d.id
    LIMIT $9
),
target AS (  -- state as text: see leases/record_query.sql; checked again once the row is locked
    SELECT d.id, d.state::text AS was FROM deliveries d
    WHERE d.id = ANY(ARRAY(SELECT id FROM batch)) AND d.state::text = ANY($10::text[])
      AND (d.state::text <> 'leased' OR d.attempt_id IS NULL)
    FOR UPDATE
),
changed AS (
    UPDATE deliveries d
    SET state = $11::text::delivery_state,
        reason = CASE WHEN $11::text = 'queued' THEN d.reason ELSE 'admin' END,
        next_attempt_at = CASE WHEN $11::text = 'queued' THEN $13 ELSE d.next_attempt_at END,
        lease_owner = NULL, lease_expires_at = NULL, updated_at = $13
    FROM target
    WHERE d.id = target.id
    RETURNING d.id, d.message, target.was
),
resolved AS (
    DELETE FROM unknown_sends u USING changed WHERE u.delivery = changed.id
),
logged AS (
    INSERT INTO events (at, kind, message, delivery, tenant, data)
    SELECT $13, CASE WHEN $11::text = 'queued' THEN 'requeued' ELSE $11::text END, c.message, c.id, m.tenant,
           jsonb_build_object('reason', 'admin', 'action', $12::text, 'was', c.was)
    FROM changed c JOIN messages m ON m.id = c.message
)
SELECT (SELECT max(id) FROM batch) AS last,
       ARRAY(SELECT id FROM changed ORDER BY id) AS ids,
       ARRAY(SELECT was FROM changed ORDER BY id) AS was
