-- Forget the reputation windows' and the warm-up complaints' minute counts and the
-- tenants' quota counts from before $1 (at least two days ago: the longest window
-- is a day, and a warm-up day is judged at the first checkpoint after it ends).
-- Returns how many went.
WITH counts AS (
    DELETE FROM reputation_counts WHERE minute < $1 RETURNING 1
),
complaints AS (
    DELETE FROM warmup_complaints WHERE minute < $1 RETURNING 1
),
usage AS (
    DELETE FROM tenant_usage WHERE starts < $1 RETURNING 1
)
SELECT (SELECT count(*) FROM counts) + (SELECT count(*) FROM complaints) + (SELECT count(*) FROM usage)
