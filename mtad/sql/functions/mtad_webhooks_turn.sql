-- A turn of the webhook sender of node p_node at p_now. First the rows p_rows of the
-- requests it sent are settled, by request (p_requests, with p_errors and p_due alike):
-- delivered where the error is NULL, else due again at the request's p_due, or dead
-- where that is NULL too (not those whose lease another node has taken since). Then it
-- leases until p_until the requests it may start now, at most
-- p_room: of each endpoint with rows due, as many as make p_per_endpoint in flight here
-- (p_flying are, to endpoints p_endpoints), the requests to send again first, whole,
-- then rows never sent, up to the endpoint's batch a request, and of each (endpoint,
-- message) only its oldest pending row (one message's go out in order). The rows just
-- settled are still leased in the statement's snapshot, so none is taken again. An
-- endpoint another node is taking from is skipped, so that a request is never split
-- between two nodes. Returns the rows leased, then a row of the requests settled.
-- Planned once per session, generic, by index only (the settings): a plan made while
-- the outbox was empty must not scan it once per row when it fills. The rows updated
-- are looked up by key (= ANY), whatever the join the plan chose; the rows settled are
-- matched to their few requests (rows x requests comparisons at most, never rows x rows).
CREATE OR REPLACE FUNCTION mtad_webhooks_turn(
    p_node text, p_now timestamptz, p_until timestamptz, p_per_endpoint integer, p_endpoints bigint[],
    p_flying integer[], p_room integer, p_rows bigint[], p_requests bigint[], p_due timestamptz[], p_errors text[]
) RETURNS TABLE (id bigint, request bigint, endpoint bigint, tenant text, url text, batch integer, secret bytea,
                 previous_secret bytea, previous_until timestamptz, payload text, attempts integer,
                 created_at timestamptz, webhook_id text, recorded bigint[])
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan SET enable_seqscan = off SET enable_bitmapscan = off AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    WITH settled AS (
        UPDATE webhook_messages m
        SET state = CASE WHEN s.error IS NULL THEN 'delivered' WHEN s.next_at IS NULL THEN 'dead' ELSE 'pending' END,
            next_at = coalesce(s.next_at, m.next_at),
            done_at = CASE WHEN s.error IS NULL OR s.next_at IS NULL THEN p_now END,
            last_error = s.error, leased_by = NULL, leased_until = NULL
        FROM unnest(p_requests, p_due, p_errors) AS s (request, next_at, error)
        -- state || '': a partial index on state (a scan of every pending row) never serves this lookup by key
        WHERE m.id = ANY (p_rows) AND m.request = s.request AND m.leased_by = p_node AND m.state || '' = 'pending'
        RETURNING m.request
    ),
    endpoint AS (
        SELECT w.id, w.batch, p_per_endpoint - coalesce(f.flying, 0) AS room
        FROM webhook_endpoints w
        LEFT JOIN unnest(p_endpoints, p_flying) AS f (endpoint, flying) ON f.endpoint = w.id
        WHERE p_room > 0 AND coalesce(f.flying, 0) < p_per_endpoint
          AND ((SELECT min(n.next_at) FROM webhook_messages n
                WHERE n.endpoint = w.id AND n.state = 'pending' AND n.request IS NULL) <= p_now
               OR (SELECT min(r.next_at) FROM webhook_messages r
                   WHERE r.endpoint = w.id AND r.state = 'pending' AND r.request IS NOT NULL
                     AND (r.leased_until IS NULL OR r.leased_until <= p_now)) <= p_now)
        FOR NO KEY UPDATE OF w SKIP LOCKED
    ),
    again AS (  -- requests to send again, whole
        SELECT e.id AS endpoint, e.batch, e.room, r.id, r.request, r.next_at
        FROM endpoint e
        CROSS JOIN LATERAL (
            SELECT r.id, r.request, r.next_at FROM webhook_messages r
            WHERE r.endpoint = e.id AND r.state = 'pending' AND r.next_at <= p_now AND r.request IS NOT NULL
              AND (r.leased_until IS NULL OR r.leased_until <= p_now)
            ORDER BY r.next_at, r.request, r.id
            LIMIT e.room * e.batch
            FOR UPDATE SKIP LOCKED
        ) r
    ),
    fresh AS (  -- rows never sent
        SELECT e.id AS endpoint, e.batch, e.room, n.id, NULL::bigint AS request, n.next_at
        FROM endpoint e
        CROSS JOIN LATERAL (
            SELECT n.id, n.next_at FROM webhook_messages n
            WHERE n.endpoint = e.id AND n.state = 'pending' AND n.next_at <= p_now AND n.request IS NULL
              AND (n.message IS NULL OR NOT EXISTS (  -- o.id + 0: looked up by message, never by a range of ids
                  SELECT 1 FROM webhook_messages o
                  WHERE o.endpoint = n.endpoint AND o.message = n.message AND o.state = 'pending' AND o.id + 0 < n.id))
            ORDER BY n.next_at, n.id
            LIMIT e.room * e.batch
            FOR UPDATE SKIP LOCKED
        ) n
    ),
    due AS (SELECT * FROM again UNION ALL SELECT * FROM fresh),
    -- A request's place among its endpoint's: those to send again by (next_at, request),
    -- then the new rows cut into batches in (next_at, id) order.
    placed AS (
        SELECT d.*, CASE WHEN d.request IS NOT NULL THEN dense_rank() OVER again_order
                         ELSE (row_number() OVER fresh_order - 1) / d.batch + 1 END AS place
        FROM due d
        WINDOW again_order AS (PARTITION BY d.endpoint, d.request IS NULL ORDER BY d.next_at, d.request),
               fresh_order AS (PARTITION BY d.endpoint, d.request IS NULL ORDER BY d.next_at, d.id)
    ),
    grouped AS (
        SELECT p.id, p.endpoint, p.room,
               coalesce(p.request, min(p.id) OVER (PARTITION BY p.endpoint, p.request IS NULL, p.place)) AS request,
               p.place + CASE WHEN p.request IS NULL THEN coalesce(max(p.place) FILTER (WHERE p.request IS NOT NULL)
                                                                    OVER (PARTITION BY p.endpoint), 0)
                              ELSE 0 END AS place
        FROM placed p
    ),
    -- The node's room goes to each endpoint's first request, then to each one's second, ...
    chosen AS (
        SELECT t.id, t.request FROM (
            SELECT g.id, g.request, dense_rank() OVER (ORDER BY g.place, g.endpoint) AS turn
            FROM grouped g WHERE g.place <= g.room
        ) t
        WHERE t.turn <= p_room
    ),
    taken AS (
        UPDATE webhook_messages m
        SET request = c.request, next_at = p_now, leased_by = p_node, leased_until = p_until,
            attempts = m.attempts + 1
        FROM chosen c, webhook_endpoints w
        WHERE m.id = ANY (ARRAY (SELECT c.id FROM chosen c)) AND m.id = c.id AND w.id = m.endpoint
        RETURNING m.id, m.request, m.endpoint, w.tenant, w.url, w.batch, w.secret, w.previous_secret, w.previous_until,
                  m.payload, m.attempts, m.created_at, m.webhook_id
    )
    SELECT t.*, NULL::bigint[] AS recorded FROM taken t
    UNION ALL  -- a last row: the requests settled
    SELECT NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
           (SELECT array_agg(DISTINCT s.request) FROM settled s);
END
$$;
