-- One batch of webhook requests: the next $3 by id after $1; those delivered or dead
-- before $2 go (pending ones stay, whatever their age). Returns the last id looked
-- at (NULL: none left), how many went, and whether the batch reached a request
-- written at or after $2 (ids follow time: stop there).
WITH batch AS MATERIALIZED (
    SELECT w.id, w.state, w.done_at, w.created_at FROM webhook_messages w
    WHERE w.id > $1 ORDER BY w.id LIMIT $3
),
gone AS (
    DELETE FROM webhook_messages w USING batch b
    WHERE w.id = b.id AND b.state IN ('delivered', 'dead') AND b.done_at < $2
    RETURNING 1
)
SELECT (SELECT max(b.id) FROM batch b) AS last,
       (SELECT count(*) FROM gone) AS deleted,
       EXISTS (SELECT 1 FROM batch b WHERE b.created_at >= $2) AS young
