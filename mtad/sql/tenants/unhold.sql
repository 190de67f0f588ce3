-- The deliveries of tenant $1 held while it was paused are due again at $2.
WITH due AS (
    UPDATE deliveries d SET next_attempt_at = $2, updated_at = $2
    FROM messages m
    WHERE m.id = d.message AND m.tenant = $1 AND d.state IN ('queued', 'deferred')
      AND d.next_attempt_at = 'infinity'
    RETURNING 1
)
SELECT count(*) FROM due
