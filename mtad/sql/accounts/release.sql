-- Give back the slot of reservation $1 (a definite rejection that was not the
-- account's fault): the send no longer counts, nor do its recipients in its day's.
-- A confirmed reservation went out and is never released. Returns its id, or no
-- row if nothing was released.
WITH gone AS (
    DELETE FROM account_reservations WHERE id = $1 AND state = 'reserved'
    RETURNING id, account, reserved_at, recipients
), uncounted AS (
    UPDATE account_days d SET sends = d.sends - gone.recipients
    FROM gone JOIN accounts a ON a.id = gone.account
    WHERE d.account = gone.account AND d.day = (gone.reserved_at AT TIME ZONE a.time_zone)::date
)
SELECT id FROM gone
