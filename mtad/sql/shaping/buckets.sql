-- The shared state of every bucket (read at start and after every checkpoint).
SELECT route_group, source, rate, sessions, changed_by, changed_at FROM buckets
