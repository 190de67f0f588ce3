-- How many deliveries match the filters (queue/match.sql), by state; `sending`:
-- those leased whose attempt has begun (its id written: maybe on the wire).
SELECT d.state::text AS state, count(*) AS n,
       count(*) FILTER (WHERE d.state::text = 'leased' AND d.attempt_id IS NOT NULL) AS sending
FROM deliveries d
JOIN messages m ON m.id = d.message
WHERE
\include queue/match
GROUP BY d.state
