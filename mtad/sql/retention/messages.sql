-- One batch of messages: the next $3 by id after $1 and before $2 (queue ids are
-- time-ordered, so this is a range of the primary key); those received before $4
-- whose every delivery is in a final state ($5) go, with their deliveries. A final
-- delivery never changes again, so no lock is needed. States compare as text (see
-- leases/record_query.sql). Returns the last id looked at (NULL: the range is done), the
-- messages and deliveries deleted, and the old messages kept for a live delivery.
WITH batch AS MATERIALIZED (
    SELECT m.id, m.received_at < $4 AS old FROM messages m
    WHERE m.id > $1 AND m.id < $2
    ORDER BY m.id LIMIT $3
),
live AS MATERIALIZED (
    SELECT DISTINCT d.message FROM batch b JOIN deliveries d ON d.message = b.id
    WHERE d.state::text <> ALL ($5::text[])
),
done AS MATERIALIZED (
    SELECT b.id FROM batch b WHERE b.old AND NOT EXISTS (SELECT 1 FROM live WHERE live.message = b.id)
),
gone_deliveries AS (
    DELETE FROM deliveries d USING done WHERE d.message = done.id RETURNING 1
),
gone AS (
    DELETE FROM messages m USING done WHERE m.id = done.id RETURNING 1
)
SELECT (SELECT b.id FROM batch b ORDER BY b.id DESC LIMIT 1) AS last,
       (SELECT count(*) FROM gone) AS messages,
       (SELECT count(*) FROM gone_deliveries) AS deliveries,
       (SELECT count(*) FROM batch b WHERE b.old AND EXISTS (SELECT 1 FROM live WHERE live.message = b.id)) AS kept
