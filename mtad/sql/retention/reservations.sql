-- One batch of mailbox reservations: the next $3 by id after $1; the settled ones
-- reserved before $2 go, but for each account's latest (its gap runs from it).
-- Returns the last id looked at (NULL: none left), how many went, and whether the
-- batch reached a reservation made at or after $2 (ids follow time: stop there).
WITH batch AS MATERIALIZED (
    SELECT r.id, r.account, r.reserved_at, r.settled_at FROM account_reservations r
    WHERE r.id > $1 ORDER BY r.id LIMIT $3
),
gone AS (
    DELETE FROM account_reservations r USING batch b
    WHERE r.id = b.id AND b.reserved_at < $2 AND b.settled_at IS NOT NULL
      AND b.id <> (SELECT l.id FROM account_reservations l WHERE l.account = b.account
                   ORDER BY l.reserved_at DESC, l.id DESC LIMIT 1)
    RETURNING 1
)
SELECT (SELECT max(b.id) FROM batch b) AS last,
       (SELECT count(*) FROM gone) AS deleted,
       EXISTS (SELECT 1 FROM batch b WHERE b.reserved_at >= $2) AS young
