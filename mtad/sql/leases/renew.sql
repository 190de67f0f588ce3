-- Extend the leases node $1 still holds; returns the ids it holds. A row another
-- statement has locked (this node recording or releasing it) is not waited for:
-- a renewal locks thousands of rows in the order its plan reads them, a batch of
-- records a few in another, and waiting could deadlock the two. Such a row keeps
-- its lease until the statement that holds it decides, and counts as held.
WITH renewed AS (
    UPDATE deliveries d SET lease_expires_at = $3
    FROM (
        SELECT id FROM deliveries
        WHERE id = ANY($2::bigint[]) AND state::text = 'leased' AND lease_owner = $1  -- state as text: see record_query.sql
        FOR UPDATE SKIP LOCKED
    ) l
    WHERE d.id = l.id
)
SELECT id FROM deliveries
WHERE id = ANY($2::bigint[]) AND state::text = 'leased' AND lease_owner = $1
