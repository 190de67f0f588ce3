-- The receivers answered 250 to the sends of reservations $1 (the sends of
-- deliveries $2, at $3: each an array, by position); returns the ids confirmed
-- (one released meanwhile is not there).
UPDATE account_reservations r SET state = 'confirmed', delivery = c.delivery, settled_at = c.at
FROM unnest($1::bigint[], $2::bigint[], $3::timestamptz[]) AS c (id, delivery, at)
WHERE r.id = c.id
RETURNING r.id
