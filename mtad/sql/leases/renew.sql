-- Extend the leases node $1 still holds; returns the ids it holds.
UPDATE deliveries SET lease_expires_at = $3
WHERE id = ANY($2::bigint[]) AND state::text = 'leased' AND lease_owner = $1  -- state as text: see record.sql
RETURNING id
