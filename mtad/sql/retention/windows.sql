-- Forget the reputation windows' minute counts and the tenants' quota counts from
-- before $1 (at least two days ago: the longest window is a day). Returns how many went.
WITH counts AS (
    DELETE FROM reputation_counts WHERE minute < $1 RETURNING 1
),
usage AS (
    DELETE FROM tenant_usage WHERE starts < $1 RETURNING 1
)
SELECT (SELECT count(*) FROM counts) + (SELECT count(*) FROM usage)
