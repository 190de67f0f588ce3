-- A send through account $1 failed on the account's side at $2 ($3: the event's
-- data); the breaker's settings are $4 window (seconds), $5 failures that trip it,
-- $6 system successes needed in the window, $7 how long a trip lasts (seconds),
-- $8 trips in a day that disconnect. Returns the state the account moved to, or
-- NULL. See mtad_account_failure (migration 0007).
SELECT mtad_account_failure($1, $2, $3::jsonb, make_interval(secs => $4), $5, $6, make_interval(secs => $7), $8)
