-- The leased deliveries of campaign $1 whose attempt has not begun (no attempt id)
-- are taken back from their nodes at $2, held (reason admin), for cancel_rest.sql
-- in the same transaction: the node's begin then finds them no longer leased and
-- never sends them (as queue/act.sql's hold). State as text: see leases/record_query.sql.
UPDATE deliveries d
SET state = 'held', reason = 'admin', lease_owner = NULL, lease_expires_at = NULL, updated_at = $2
FROM messages m
WHERE m.campaign = $1 AND d.message = m.id AND d.state::text = 'leased' AND d.attempt_id IS NULL
