-- Written before DATA: attempt $3 of node $1 is about to send deliveries $2.
-- Returns the ids still leased to the node (a lost lease must not be sent).
UPDATE deliveries SET attempt_id = $3, route_group = $4, updated_at = $5
WHERE id = ANY($2::bigint[]) AND state = 'leased' AND lease_owner = $1
RETURNING id
