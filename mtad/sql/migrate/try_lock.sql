-- The migration lock if it is free now (true), else false: for a caller that waits a bounded time.
SELECT pg_try_advisory_lock($1)
