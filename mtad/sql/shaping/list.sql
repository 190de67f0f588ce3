-- Every bucket, with the usage of the live nodes (heartbeat at or after $1) summed.
SELECT b.route_group, b.source, b.rate, b.sessions, b.changed_by, b.changed_at, b.updated_at,
       count(u.node) AS nodes,
       coalesce(sum(u.in_flight), 0) AS in_flight,
       coalesce(sum(u.tokens), 0) AS tokens,
       coalesce(sum(u.decreases), 0) AS decreases,
       coalesce(sum(u.increases), 0) AS increases
FROM buckets b
LEFT JOIN bucket_usage u
    ON u.route_group = b.route_group AND u.source = b.source
   AND u.node IN (SELECT id FROM nodes WHERE heartbeat_at >= $1)
GROUP BY b.route_group, b.source
ORDER BY b.route_group, b.source
