-- Resume paused campaign $2 of tenant $1 at $3. Its held deliveries are released by
-- campaigns/unhold.sql, a statement of its own in the same transaction: it must see
-- what a begin.sql that held this row's lock committed meanwhile. No row: not paused.
UPDATE campaigns SET state = 'active', reason = NULL, changed_at = $3
WHERE tenant = $1 AND name = $2 AND state = 'paused'
RETURNING id
