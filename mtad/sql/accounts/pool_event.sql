-- Account pool $1 paused or resumed at $2 ($3: the event's data).
INSERT INTO events (at, kind, data) VALUES ($2, 'account_pool', $3::jsonb || jsonb_build_object('pool', $1::text))
