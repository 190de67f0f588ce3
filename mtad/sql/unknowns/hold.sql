-- Deliveries $3 of node $1 whose relayed send may have gone out, held at $2: state
-- unknown (reason maybe_sent), due again at $4[i] unless found sent ('infinity':
-- only when an operator retries), with an 'unknown' event (tenant $5[i], data
-- $6[i]) and the account $8[i] it may have gone out through (NULL: not known). The
-- attempt counts and its id is cleared; group $7[i] (NULL: unchanged). Only the
-- deliveries still leased to the node change; returns their ids. Found by primary
-- key, the state compared as text: see leases/record_query.sql.
WITH changed AS (
    UPDATE deliveries d
    SET state = 'unknown', reason = 'maybe_sent',
        next_attempt_at = ($4::timestamptz[])[array_position($3::bigint[], d.id)],
        attempts = d.attempts + 1,
        route_group = coalesce(($7::text[])[array_position($3::bigint[], d.id)], d.route_group),
        lease_owner = NULL, lease_expires_at = NULL, attempt_id = NULL, updated_at = $2
    WHERE d.id = ANY($3::bigint[]) AND d.lease_owner = $1 AND d.state::text = 'leased'
    RETURNING d.id, d.message, array_position($3::bigint[], d.id) AS i
),
kept AS (
    INSERT INTO unknown_sends (delivery, account, since)
    SELECT id, ($8::integer[])[i], $2 FROM changed
    ON CONFLICT (delivery) DO UPDATE
    SET account = excluded.account, since = excluded.since, looked_at = NULL, folder = NULL
),
logged AS (
    INSERT INTO events (at, kind, message, delivery, tenant, data)
    SELECT $2, 'unknown', message, id, ($5::text[])[i], ($6::jsonb[])[i] FROM changed
)
SELECT coalesce(array_agg(id), '{}') AS ids FROM changed
