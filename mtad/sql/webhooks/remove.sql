-- Remove endpoint $1; returns whether there was one.
DELETE FROM webhook_endpoints WHERE id = $1 RETURNING true
