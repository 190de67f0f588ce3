-- Delete up to $2 reservations made before $1 that no limit looks at any more: the
-- caller passes a time older than the start of every account's day and the
-- longest rate window (two days ago is safe). Each account's latest reservation
-- stays, since the gap is measured from it. Returns how many were deleted.
WITH old AS (
    SELECT r.id FROM account_reservations r
    WHERE r.reserved_at < $1
      AND r.id <> (SELECT l.id FROM account_reservations l WHERE l.account = r.account
                   ORDER BY l.reserved_at DESC, l.id DESC LIMIT 1)
    LIMIT $2
), gone AS (
    DELETE FROM account_reservations r USING old WHERE r.id = old.id RETURNING 1
), old_days AS (  -- the days' counts go with them (a day before $1 is over in every time zone)
    DELETE FROM account_days d WHERE d.day < ($1 AT TIME ZONE 'UTC')::date - 1
)
SELECT count(*) FROM gone
