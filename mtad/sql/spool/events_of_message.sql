SELECT id, at, kind, message, delivery, tenant, data::text AS data
FROM events WHERE message = $1 ORDER BY id
