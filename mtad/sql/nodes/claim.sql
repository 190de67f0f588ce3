-- This session's claim on node id $1: one process per node id on a database. A
-- session lock, so it ends with the process that holds it, killed or not.
SELECT pg_try_advisory_lock(hashtext('mtad_node'), hashtext($1))
