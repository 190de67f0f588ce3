-- The oldest transaction still running: every event below it is written for good.
SELECT pg_snapshot_xmin(pg_current_snapshot())::text::bigint
