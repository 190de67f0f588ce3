-- The deliveries VERP addresses name ($1, ids): each one's recipient, message and
-- provider group; no row for an id with no delivery (never was, or deleted since).
SELECT d.id, d.recipient, d.message, d.route_group
FROM deliveries d
WHERE d.id = ANY ($1::bigint[])
