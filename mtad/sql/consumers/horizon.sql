-- The oldest transaction still running: every event below it is committed.
SELECT pg_snapshot_xmin(pg_current_snapshot())::text::bigint
