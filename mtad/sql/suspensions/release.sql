-- What was set aside for a suspension that ended at $1 is due now: the deliveries
-- queued or deferred due at infinity or at the suspension's end $2, except those
-- of a paused tenant or a paused campaign (they wait for its resume). Whatever is still suspended for
-- another reason is set aside again when a node takes it. Returns how many.
WITH due AS (
    UPDATE deliveries d SET next_attempt_at = $1, updated_at = $1
    FROM messages m
    WHERE m.id = d.message AND d.state IN ('queued', 'deferred')
      AND (d.next_attempt_at = 'infinity' OR d.next_attempt_at = $2)
      AND NOT EXISTS (SELECT 1 FROM tenant_states t WHERE t.tenant = m.tenant AND t.paused_at IS NOT NULL)
      AND NOT EXISTS (SELECT 1 FROM campaigns c WHERE c.id = d.campaign AND c.state <> 'active')
    RETURNING 1
)
SELECT count(*) FROM due
