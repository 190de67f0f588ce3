-- Request $1, leased by node $2, was answered 2xx at $3.
UPDATE webhook_messages
SET state = 'delivered', done_at = $3, leased_by = NULL, leased_until = NULL, last_error = NULL
WHERE id = $1 AND leased_by = $2 AND state = 'pending'
