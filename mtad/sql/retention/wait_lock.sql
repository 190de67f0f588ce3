-- The pruning lock ($1), once the node pruning now (if any) has finished its round.
SELECT pg_advisory_lock($1)
