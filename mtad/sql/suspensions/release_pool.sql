-- What was handed back to the spool while account pool $1 had no account free
-- (leases/release.sql: queued, due at the time its account_pool_busy event says)
-- is due now ($2): an account of the pool was enabled. Returns how many.
WITH due AS (
    UPDATE deliveries d SET next_attempt_at = $2, updated_at = $2
    WHERE d.state IN ('queued', 'deferred') AND d.reason = 'released'
      AND d.next_attempt_at > $2 AND d.next_attempt_at < 'infinity'
      AND EXISTS (
          SELECT 1 FROM events e  -- by message: events_message
          WHERE e.message = d.message AND e.delivery = d.id AND e.kind = 'requeued'
            AND e.data ->> 'reason' = 'account_pool_busy' AND e.data ->> 'account_pool' = $1
            AND (e.data ->> 'until')::timestamptz = d.next_attempt_at
      )
    RETURNING 1
)
SELECT count(*) FROM due
