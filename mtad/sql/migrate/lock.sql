-- Held for the whole migration run, so two nodes never migrate at once.
SELECT pg_advisory_lock($1)
