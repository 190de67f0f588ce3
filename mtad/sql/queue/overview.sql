-- The deliveries in the states $1 counted by state and provider group (the group of
-- the last attempt; '-': none), with the oldest and the next due of each: one pass
-- over deliveries alone, no message read (the status page's queue).
SELECT d.state::text AS state, coalesce(d.route_group, '-') AS key, count(*) AS n, min(d.created_at) AS oldest,
       min(d.next_attempt_at) FILTER (WHERE d.state::text IN ('queued', 'deferred')) AS next_due
FROM deliveries d
WHERE d.state::text = ANY($1::text[])
GROUP BY 1, 2
