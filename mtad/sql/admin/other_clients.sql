-- Client sessions on this server other than the caller's.
SELECT count(*) FROM pg_stat_activity
WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()
