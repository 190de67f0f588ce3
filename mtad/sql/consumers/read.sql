-- The events after position ($1 xid, $2 id), of the kinds $3 (NULL: every kind),
-- at most $4, in (xid, id) order, all of transactions older than the oldest still
-- running (the horizon: nothing can be written below it any more). At least one
-- row: the horizon, with no event when none is due.
WITH h AS (SELECT pg_snapshot_xmin(pg_current_snapshot()) AS horizon)
SELECT h.horizon::text::bigint AS horizon, e.xid::text::bigint AS xid, e.id, e.at, e.kind, e.tenant,
       e.message, e.delivery, e.data::text AS data
FROM h LEFT JOIN LATERAL (
    SELECT * FROM events e
    WHERE e.xid IS NOT NULL AND (e.xid, e.id) > ($1::text::xid8, $2::bigint) AND e.xid < h.horizon
      AND ($3::text[] IS NULL OR e.kind = ANY ($3::text[]))
    ORDER BY e.xid, e.id
    LIMIT $4
) e ON true
