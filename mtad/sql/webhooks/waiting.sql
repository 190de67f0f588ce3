-- Of endpoints $1 and messages $2, the (endpoint, message) pairs with rows pending:
-- a new event of such a message goes to the outbox, after them.
SELECT DISTINCT m.endpoint, m.message FROM webhook_messages m
WHERE m.endpoint = ANY ($1::bigint[]) AND m.message = ANY ($2::uuid[]) AND m.state = 'pending'
