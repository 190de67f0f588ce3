-- Forget the accounts' daily counts of days before the day before $1's UTC date:
-- those days are over in every time zone. Returns how many went.
WITH gone AS (
    DELETE FROM account_days d WHERE d.day < ($1::timestamptz AT TIME ZONE 'UTC')::date - 1 RETURNING 1
)
SELECT count(*) FROM gone
