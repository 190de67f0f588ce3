-- The account through which the unrecorded attempt of each delivery of $1 (one with
-- an attempt id) went: that of the latest reservation taken for a delivery of the
-- same message and attempt (a reservation names the first delivery of its send).
-- A delivery without one is left out. Read only after a crash, for a few rows.
SELECT d.id, a.id AS account, a.name
FROM deliveries d
CROSS JOIN LATERAL (
    SELECT r.account FROM account_reservations r
    WHERE r.delivery IN (SELECT s.id FROM deliveries s WHERE s.message = d.message AND s.attempt_id = d.attempt_id)
    ORDER BY r.id DESC
    LIMIT 1
) taken
JOIN accounts a ON a.id = taken.account
WHERE d.id = ANY($1::bigint[]) AND d.attempt_id IS NOT NULL
