-- How many deliveries match the filters (as in queue/list.sql), by state; `sending`:
-- those leased whose attempt has begun (its id written: maybe on the wire).
SELECT d.state::text AS state, count(*) AS n,
       count(*) FILTER (WHERE d.state::text = 'leased' AND d.attempt_id IS NOT NULL) AS sending
FROM deliveries d
JOIN messages m ON m.id = d.message
WHERE ($1::text[] IS NULL OR d.state::text = ANY($1::text[]))
  AND ($2::text IS NULL OR m.tenant = $2::text)
  AND ($3::text IS NULL OR coalesce(d.route_group, '-') = $3::text)
  AND ($4::text IS NULL OR d.domain = $4::text)
  AND ($5::timestamptz IS NULL OR d.created_at <= $5::timestamptz)
  AND ($6::uuid IS NULL OR d.message = $6::uuid)
  AND ($7::bigint IS NULL OR d.id = $7::bigint)
GROUP BY d.state
