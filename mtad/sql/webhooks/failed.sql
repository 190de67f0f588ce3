-- Request $1, leased by node $2, failed at $3 ($4: why): due again at $5, or dead
-- when $5 is NULL.
UPDATE webhook_messages
SET state = CASE WHEN $5::timestamptz IS NULL THEN 'dead' ELSE 'pending' END,
    next_at = coalesce($5::timestamptz, next_at),
    done_at = CASE WHEN $5::timestamptz IS NULL THEN $3::timestamptz END,
    last_error = $4, leased_by = NULL, leased_until = NULL
WHERE id = $1 AND leased_by = $2 AND state = 'pending'
