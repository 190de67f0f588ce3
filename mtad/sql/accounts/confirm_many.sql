-- The receivers answered 250 to the sends of reservations $1 (the sends of
-- deliveries $2, at $3, NULL: now by PostgreSQL's clock: each an array, by
-- position); returns the ids confirmed (one released meanwhile is not there).
--
-- Committed without waiting for the WAL flush (synchronous_commit off for this
-- transaction only): a confirmation lost in a crash of PostgreSQL leaves its
-- reservation unsettled, and it then counts and holds its mailbox until its lease
-- says it is gone.
WITH quick AS (SELECT set_config('synchronous_commit', 'off', true))
UPDATE account_reservations r
SET state = 'confirmed', delivery = coalesce(c.delivery, r.delivery), settled_at = coalesce(c.at, clock_timestamp())
FROM unnest($1::bigint[], $2::bigint[], $3::timestamptz[]) AS c (id, delivery, at), quick
WHERE r.id = c.id AND r.state <> 'released'
RETURNING r.id
