-- The campaigns of tenant $1 (NULL: every tenant's), or only the one named $2, each
-- with its progress: the counts folded so far plus the moves not folded yet, by
-- bucket, and what settled (delivered, bounced, failed) since $3.
SELECT c.id, c.tenant, c.name, c.state::text AS state, c.reason, c.created_at, c.changed_at, c.max_per_hour,
       c.max_per_day, c.pool_paused,
       counts.buckets, counts.ns,
       (SELECT coalesce(sum(settled), 0) FROM campaign_minutes WHERE campaign = c.id AND minute >= $3)
       + (SELECT coalesce(sum(n), 0) FROM campaign_moves
          WHERE campaign = c.id AND at >= $3 AND (bucket IN ('delivered', 'failed') OR bucket LIKE 'bounced:%'))
           AS settled_since
FROM campaigns c
CROSS JOIN LATERAL (
    SELECT coalesce(array_agg(bucket ORDER BY bucket), '{}') AS buckets, coalesce(array_agg(n ORDER BY bucket), '{}') AS ns
    FROM (
        SELECT bucket, sum(n)::bigint AS n
        FROM (SELECT bucket, n FROM campaign_counts WHERE campaign = c.id
              UNION ALL
              SELECT bucket, n FROM campaign_moves WHERE campaign = c.id) every
        GROUP BY bucket HAVING sum(n) <> 0
    ) summed
) counts
WHERE ($1::text IS NULL OR c.tenant = $1) AND ($2::text IS NULL OR c.name = $2)
ORDER BY c.tenant, c.created_at, c.name
