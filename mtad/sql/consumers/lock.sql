-- Consumer $1's position, locked for this transaction; no row when another node
-- holds it (that node is consuming: this one need not).
SELECT position_xid::text::bigint AS xid, position_id AS id
FROM event_consumers WHERE name = $1
FOR UPDATE SKIP LOCKED
