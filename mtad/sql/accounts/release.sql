-- Give back the slot of reservation $1 (a definite rejection that was not the
-- account's fault): the send no longer counts. A confirmed reservation went out and
-- is never released. Returns its id, or no row if nothing was released.
DELETE FROM account_reservations WHERE id = $1 AND state = 'reserved' RETURNING id
