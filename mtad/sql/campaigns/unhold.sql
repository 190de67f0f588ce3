-- The deliveries of campaign $1 that wait (due at infinity) are due at $2, except
-- those of a paused tenant (they wait for its resume). What a suspension still
-- holds is set aside again when a node takes it. Returns how many.
WITH due AS (
    UPDATE deliveries d SET next_attempt_at = $2, updated_at = $2
    FROM messages m
    WHERE m.campaign = $1 AND d.message = m.id AND d.state IN ('queued', 'deferred')
      AND d.next_attempt_at = 'infinity'
      AND NOT EXISTS (SELECT 1 FROM tenant_states t WHERE t.tenant = m.tenant AND t.paused_at IS NOT NULL)
    RETURNING 1
)
SELECT count(*) FROM due
