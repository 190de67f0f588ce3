-- A send through account $1 at $2 was refused for its recipient or its content
-- ($3: the event's data): not the account's fault, but it lowers its health.
INSERT INTO events (at, kind, data)
SELECT $2, 'account_bounce', $3::jsonb || jsonb_build_object('account', a.id, 'name', a.name, 'pool', a.pool)
FROM accounts a WHERE a.id = $1
