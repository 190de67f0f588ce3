-- Node $1 settles at $2 the rows $3 of requests it leased: delivered where the error
-- ($5) is NULL, else due again at $4, or dead where that is NULL too. Returns the
-- requests recorded (not those whose lease another node has taken since).
WITH settled AS (
    UPDATE webhook_messages m
    SET state = CASE WHEN s.error IS NULL THEN 'delivered' WHEN s.next_at IS NULL THEN 'dead' ELSE 'pending' END,
        next_at = coalesce(s.next_at, m.next_at),
        done_at = CASE WHEN s.error IS NULL OR s.next_at IS NULL THEN $2::timestamptz END,
        last_error = s.error, leased_by = NULL, leased_until = NULL
    FROM unnest($3::bigint[], $4::timestamptz[], $5::text[]) AS s (id, next_at, error)
    WHERE m.id = s.id AND m.leased_by = $1 AND m.state = 'pending'
    RETURNING m.request
)
SELECT DISTINCT request FROM settled
