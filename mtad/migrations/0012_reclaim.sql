-- A node that starts takes back at once what its previous life held (same node id,
-- the old process gone): queued again with this reason, instead of waiting for the
-- leases to expire. Mirrors mtad.lifecycle.Reason.RECLAIMED.
ALTER TYPE delivery_reason ADD VALUE 'reclaimed';
