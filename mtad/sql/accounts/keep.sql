-- The send of reservation $1 was settled at $2 (NULL: now, by PostgreSQL's clock)
-- without a 250 (a quota or rate reply, or an outcome left unknown): it keeps
-- counting, and the gap runs from then.
UPDATE account_reservations SET settled_at = coalesce($2, clock_timestamp())
WHERE id = $1 AND state = 'reserved'
RETURNING id
