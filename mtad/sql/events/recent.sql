-- The last $3 events of kind $1 and tenant $2 (NULL: any), newest first.
SELECT xid::text::bigint AS xid, id, at, kind, tenant, message, delivery, data::text AS data
FROM events
WHERE ($1::text IS NULL OR kind = $1) AND ($2::text IS NULL OR tenant = $2)
ORDER BY id DESC
LIMIT $3
