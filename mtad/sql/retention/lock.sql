-- Whether this session took the pruning lock ($1): at most one node prunes at a
-- time. It lasts until the connection closes (a node that dies lets another prune).
SELECT pg_try_advisory_lock($1)
