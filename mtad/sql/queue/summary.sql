-- The deliveries that match the filters (queue/match.sql) counted by key $8
-- ('provider': the group of the last attempt, 'state', 'domain', 'tenant', 'pool': the
-- message's source pool, 'source': the address its last attempt left from, as its
-- last event with one says; '-': none) and by age at $9 in qshape's buckets (0: under
-- 5 minutes ... 9: 1280 minutes and more), with the oldest and the next due of each.
SELECT CASE $8::text WHEN 'state' THEN d.state::text WHEN 'domain' THEN d.domain WHEN 'tenant' THEN m.tenant
                     WHEN 'pool' THEN coalesce(m.pool, '-') WHEN 'source' THEN coalesce(s.source, '-')
                     ELSE coalesce(d.route_group, '-') END AS key,
       width_bucket(extract(epoch FROM $9::timestamptz - d.created_at)::float8,
                    ARRAY[300, 600, 1200, 2400, 4800, 9600, 19200, 38400, 76800]::float8[]) AS bucket,
       count(*) AS n, min(d.created_at) AS oldest,
       min(d.next_attempt_at) FILTER (WHERE d.state::text IN ('queued', 'deferred')) AS next_due
FROM deliveries d
JOIN messages m ON m.id = d.message
LEFT JOIN LATERAL (
    SELECT e.data ->> 'source' AS source FROM events e
    WHERE $8::text = 'source' AND e.message = d.message AND e.delivery = d.id AND e.data ? 'source'
    ORDER BY e.id DESC LIMIT 1
) s ON true
WHERE
\include queue/match
GROUP BY 1, 2
