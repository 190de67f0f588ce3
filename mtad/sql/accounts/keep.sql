-- The send of reservation $1 was settled at $2 without a 250 (a quota or rate reply,
-- or an outcome left unknown): it keeps counting, and the gap runs from $2.
UPDATE account_reservations SET settled_at = $2 WHERE id = $1 AND state = 'reserved' RETURNING id
