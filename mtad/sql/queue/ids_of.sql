-- The deliveries of a message, or the one delivery, named by an operator.
SELECT id, state::text AS state FROM deliveries WHERE message = $1 OR id = $2 ORDER BY id
