-- Outcomes per minute from $1 on, summed over tenants: the tenant scope's rows of
-- those minutes only (the primary key's scope, then a skip over tenant and key).
SELECT minute, sum(delivered)::bigint AS delivered, sum(deferred)::bigint AS deferred,
       sum(bounced)::bigint AS bounced
FROM reputation_counts
WHERE scope = 'tenant' AND minute >= $1::timestamptz
GROUP BY minute
ORDER BY minute
