-- Per consumer in $1: when the oldest event it has still to do was written (NULL:
-- none is waiting).
SELECT c.name, (
    SELECT e.at FROM events e
    WHERE e.xid IS NOT NULL AND (e.xid, e.id) > (c.position_xid, c.position_id)
    ORDER BY e.xid, e.id LIMIT 1
) AS oldest
FROM event_consumers c WHERE c.name = ANY ($1::text[])
