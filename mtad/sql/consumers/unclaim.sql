-- Consumer $1 is no longer this session's (see claim.sql).
SELECT pg_advisory_unlock(1836344420, hashtext($1))
