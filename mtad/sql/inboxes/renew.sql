-- Extend node $1's leases on the inboxes of accounts $2 to $3; returns those it
-- still held.
UPDATE inboxes
SET lease_until = $3
WHERE node = $1 AND account = ANY ($2::integer[])
RETURNING account
