-- The octets each tenant of $1 (NULL: every tenant) holds in the spool: its
-- messages with a delivery not final yet, found from the deliveries that wait or
-- are leased, or that an operator holds.
SELECT m.tenant, sum(m.size)::bigint AS bytes
FROM messages m
WHERE ($1::text[] IS NULL OR m.tenant = ANY($1::text[])) AND m.id IN (
    SELECT d.message FROM deliveries d WHERE d.state IN ('queued', 'deferred', 'leased', 'held')
)
GROUP BY m.tenant
