-- The statement of mtad_record (sql/functions/mtad_record.sql): the outcomes of
-- attempts by node $1 at $2, each with its event, in one statement.
-- Only deliveries still leased to the node are changed.
--
-- One table, rows found by primary key (`id = ANY`), each row's values taken from
-- the arrays at its position: no join for the planner to get wrong when statistics
-- were taken on an empty (drained) table. The state is compared as text, here and
-- in every statement that finds deliveries by id: `state = 'leased'` is the
-- predicate of the partial index deliveries_lease_expiry (and queued or deferred
-- that of deliveries_due), and with those statistics the planner ANDs a scan of
-- that whole index (every lease, and the dead entries of leases already recorded)
-- into the lookup by primary key. In the delivery benchmark that took PostgreSQL
-- from 500 to 650 us of CPU per 5-recipient message.
-- $3 ids; then per id: $4 state, $5 reason,
-- $6..$8 last reply, $9 next attempt, $10 tenant, $11 event data, $12 group,
-- $13 whether mtad itself failed; $14 the ids whose recipient goes onto its
-- tenant's suppression list (a bounce saying the address does not exist, reason
-- hard_bounce, expiring after $15, NULL: never).
WITH changed AS (
    UPDATE deliveries d
    SET state = ($4::delivery_state[])[array_position($3::bigint[], d.id)],
        reason = ($5::delivery_reason[])[array_position($3::bigint[], d.id)],
        last_code = ($6::smallint[])[array_position($3::bigint[], d.id)],
        last_enhanced = ($7::text[])[array_position($3::bigint[], d.id)],
        last_text = ($8::text[])[array_position($3::bigint[], d.id)],
        next_attempt_at = coalesce(($9::timestamptz[])[array_position($3::bigint[], d.id)], d.next_attempt_at),
        attempts = d.attempts + 1,
        failures = d.failures + CASE WHEN ($13::boolean[])[array_position($3::bigint[], d.id)] THEN 1 ELSE 0 END,
        route_group = coalesce(($12::text[])[array_position($3::bigint[], d.id)], d.route_group),
        lease_owner = NULL, lease_expires_at = NULL, attempt_id = NULL, updated_at = $2
    WHERE d.id = ANY($3::bigint[]) AND d.lease_owner = $1 AND d.state::text = 'leased'
    RETURNING d.id, d.message, d.recipient, d.state, d.last_code, d.last_enhanced, d.last_text,
              array_position($3::bigint[], d.id) AS i
),
suppressed AS (
    INSERT INTO suppressions (tenant, address, reason, detail, delivery, created_at, expires_at)
    SELECT ($10::text[])[i], lower(recipient), 'hard_bounce', concat_ws(' ', last_code, last_enhanced, last_text),
           id, $2, $2 + $15::interval
    FROM changed
    WHERE id = ANY($14::bigint[])
    ON CONFLICT (tenant, address) DO NOTHING
),
quiet AS (  -- the caller wakes the consumers after the commit (sql/events/wake.sql)
    SELECT set_config('mtad.wake_after_commit', 'on', true)
),
logged AS (
    INSERT INTO events (at, kind, message, delivery, tenant, data)
    SELECT $2, state::text, message, id, ($10::text[])[i], ($11::jsonb[])[i] FROM changed, quiet
)
SELECT array_agg(id) AS ids FROM changed
