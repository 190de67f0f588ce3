-- The deliveries of tenant $1 held while it was paused are due again at $2, but
-- those of a paused campaign (they wait for its resume).
WITH due AS (
    UPDATE deliveries d SET next_attempt_at = $2, updated_at = $2
    FROM messages m
    WHERE m.id = d.message AND m.tenant = $1 AND d.state IN ('queued', 'deferred')
      AND d.next_attempt_at = 'infinity'
      AND NOT EXISTS (SELECT 1 FROM campaigns c WHERE c.id = d.campaign AND c.state <> 'active')
    RETURNING 1
)
SELECT count(*) FROM due
