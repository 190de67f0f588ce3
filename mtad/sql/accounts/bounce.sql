-- A send through account $1 at $2 was refused for its recipient or its content
-- ($3: the event's data): not the account's fault, but it lowers its health; below
-- $4 (0: never) the account rests. Returns its health and the end of the rest, or
-- no row. See mtad_account_bounce.
SELECT health, until FROM mtad_account_bounce($1, $2, $3::jsonb, $4)
