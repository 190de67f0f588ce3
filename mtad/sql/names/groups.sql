-- The provider groups the spool knows of beside the configured ones: those with a
-- bucket or in use on a node, suspended or rerouted (small tables, read whole).
SELECT route_group FROM buckets
UNION SELECT route_group FROM bucket_usage
UNION SELECT key FROM suspensions WHERE kind = 'provider'
UNION SELECT provider FROM reroutes
ORDER BY 1
