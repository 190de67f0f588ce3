-- Consumer $1 is this session's until unclaim.sql (or the session ends); false when
-- another node's session holds it. A session lock, not a row's: it holds no
-- transaction open while an attempting consumer's requests go out.
SELECT pg_try_advisory_lock(1836344420, hashtext($1))
