-- The delivered events after position ($1 xid, $2 id) up to position ($3 xid, $4 id),
-- added to the minute counts by tenant, provider group and source address, as the
-- consumer counts the other kinds one by one (reputation.Reputation); per tenant, how many.
WITH delivered AS (
    SELECT e.tenant, e.data ->> 'group' AS route_group, e.data ->> 'source' AS source,
           date_trunc('minute', e.at, 'UTC') AS minute
    FROM events e
    WHERE e.xid IS NOT NULL AND (e.xid, e.id) > ($1::text::xid8, $2::bigint)
      AND (e.xid, e.id) <= ($3::text::xid8, $4::bigint) AND e.kind = 'delivered' AND e.tenant <> ''
),
counted AS (
    INSERT INTO reputation_counts AS c (scope, tenant, key, minute, delivered, deferred, bounced, complained,
                                        unsubscribed, refused)
    SELECT k.scope, d.tenant, k.key, d.minute, count(*), 0, 0, 0, 0, 0
    FROM delivered d, LATERAL (VALUES ('tenant', d.tenant), ('provider', d.route_group), ('source', d.source)) k (scope, key)
    WHERE k.key <> ''
    GROUP BY k.scope, d.tenant, k.key, d.minute
    ON CONFLICT (scope, tenant, key, minute) DO UPDATE SET delivered = c.delivered + excluded.delivered
)
SELECT tenant, count(*)::integer AS n FROM delivered GROUP BY tenant
