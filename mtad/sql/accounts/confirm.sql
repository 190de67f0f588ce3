-- The receiver answered 250 at $3 to the send of reservation $1 (the send of
-- delivery $2); returns its id, or no row if it is not there (it was released).
UPDATE account_reservations SET state = 'confirmed', delivery = $2, settled_at = $3 WHERE id = $1 RETURNING id
