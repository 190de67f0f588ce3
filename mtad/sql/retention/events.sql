-- One batch of events: the next $4 by id after $1; those older than $2 go, account
-- events (account_*) only when older than $3 too (the breaker and the health score
-- read them). Returns the last id looked at (NULL: none left), how many went, and
-- whether the batch reached an event at or after $2 (ids follow time: stop there).
WITH batch AS MATERIALIZED (
    SELECT e.id, e.at, e.kind FROM events e WHERE e.id > $1 ORDER BY e.id LIMIT $4
),
gone AS (
    DELETE FROM events e USING batch b
    WHERE e.id = b.id AND b.at < $2 AND (b.kind NOT LIKE 'account%' OR b.at < $3)
    RETURNING 1
)
SELECT (SELECT max(b.id) FROM batch b) AS last,
       (SELECT count(*) FROM gone) AS deleted,
       EXISTS (SELECT 1 FROM batch b WHERE b.at >= $2) AS young
