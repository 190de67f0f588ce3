-- Every event of kind $1 and tenant $2 (NULL: any) written at $3 or later, in id
-- order (streamed).
SELECT xid::text::bigint AS xid, id, at, kind, tenant, message, delivery, data::text AS data
FROM events
WHERE ($1::text IS NULL OR kind = $1) AND ($2::text IS NULL OR tenant = $2) AND at >= $3
ORDER BY id
