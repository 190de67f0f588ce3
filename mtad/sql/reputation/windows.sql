-- The sliding windows at $3 of scope $1 (NULL: every scope) and keys $2 (NULL:
-- every key), of tenant $4's mail (NULL: every tenant's): each outcome counted in
-- the last hour and in the last 24 hours.
SELECT scope, key,
       sum(delivered) FILTER (WHERE minute >= $3::timestamptz - interval '1 hour') AS delivered_1h,
       sum(deferred) FILTER (WHERE minute >= $3::timestamptz - interval '1 hour') AS deferred_1h,
       sum(bounced) FILTER (WHERE minute >= $3::timestamptz - interval '1 hour') AS bounced_1h,
       sum(complained) FILTER (WHERE minute >= $3::timestamptz - interval '1 hour') AS complained_1h,
       sum(unsubscribed) FILTER (WHERE minute >= $3::timestamptz - interval '1 hour') AS unsubscribed_1h,
       sum(refused) FILTER (WHERE minute >= $3::timestamptz - interval '1 hour') AS refused_1h,
       sum(delivered) AS delivered_24h, sum(deferred) AS deferred_24h, sum(bounced) AS bounced_24h,
       sum(complained) AS complained_24h, sum(unsubscribed) AS unsubscribed_24h, sum(refused) AS refused_24h
FROM reputation_counts
WHERE ($1::text IS NULL OR scope = $1) AND ($2::text[] IS NULL OR key = ANY($2::text[]))
  AND ($4::text IS NULL OR tenant = $4) AND minute >= $3::timestamptz - interval '24 hours'
GROUP BY scope, key
ORDER BY scope, key
