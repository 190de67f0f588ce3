-- A batch of soft bounces from before $1 (out of [suppression] soft_window: they
-- count no more), at most $2. Returns how many went.
WITH gone AS (
    DELETE FROM soft_bounces
     WHERE event = ANY (ARRAY(SELECT event FROM soft_bounces WHERE at < $1 ORDER BY at LIMIT $2))
    RETURNING 1
)
SELECT count(*) FROM gone
