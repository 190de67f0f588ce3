-- Node $1 gives back requests $2 it leased but will not send now (their endpoint has
-- as many in flight as it may): due again at once, the attempt not counted.
UPDATE webhook_messages
SET leased_by = NULL, leased_until = NULL, attempts = attempts - 1
WHERE id = ANY ($2::bigint[]) AND leased_by = $1 AND state = 'pending'
