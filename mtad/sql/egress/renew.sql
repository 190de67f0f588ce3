-- Extend node $1's leases on the addresses $2 to $3; returns those it still held.
UPDATE source_leases
SET expires_at = $3
WHERE node = $1 AND address = ANY ($2::text[])
RETURNING address
