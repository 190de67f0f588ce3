-- Node $1 leases at $2, until $3, the requests it may start now, at most $7: of each
-- endpoint with rows due, as many as make $4 in flight here ($6 are, to endpoints $5),
-- the requests to send again first, whole, then rows never sent, up to the endpoint's
-- batch a request, of each (endpoint, message) only its oldest pending row (one
-- message's go out in order). An endpoint another node is taking from is skipped, so
-- that a request is never split between two nodes.
WITH endpoint AS (
    SELECT w.id, w.batch, $4::integer - coalesce(f.flying, 0) AS room
    FROM webhook_endpoints w
    LEFT JOIN unnest($5::bigint[], $6::integer[]) AS f (endpoint, flying) ON f.endpoint = w.id
    WHERE coalesce(f.flying, 0) < $4  -- min(): an index scan that stops at the first row
      AND ((SELECT min(n.next_at) FROM webhook_messages n
            WHERE n.endpoint = w.id AND n.state = 'pending' AND n.request IS NULL) <= $2
           OR (SELECT min(r.next_at) FROM webhook_messages r
               WHERE r.endpoint = w.id AND r.state = 'pending' AND r.request IS NOT NULL
                 AND (r.leased_until IS NULL OR r.leased_until <= $2)) <= $2)
    FOR NO KEY UPDATE OF w SKIP LOCKED
),
again AS (  -- requests to send again, whole
    SELECT e.id AS endpoint, e.batch, e.room, r.id, r.request, r.next_at
    FROM endpoint e
    CROSS JOIN LATERAL (
        SELECT r.id, r.request, r.next_at FROM webhook_messages r
        WHERE r.endpoint = e.id AND r.state = 'pending' AND r.next_at <= $2 AND r.request IS NOT NULL
          AND (r.leased_until IS NULL OR r.leased_until <= $2)
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
        WHERE n.endpoint = e.id AND n.state = 'pending' AND n.next_at <= $2 AND n.request IS NULL
          AND (n.message IS NULL OR NOT EXISTS (
              SELECT 1 FROM webhook_messages o
              WHERE o.endpoint = n.endpoint AND o.message = n.message AND o.state = 'pending' AND o.id < n.id))
        ORDER BY n.next_at, n.id
        LIMIT e.room * e.batch
        FOR UPDATE SKIP LOCKED
    ) n
),
due AS (SELECT * FROM again UNION ALL SELECT * FROM fresh),
-- A request's place among its endpoint's: those to send again by (next_at, request),
-- then the new rows cut into batches in (next_at, id) order.
placed AS (
    SELECT d.*, CASE WHEN d.request IS NOT NULL
                     THEN dense_rank() OVER (PARTITION BY d.endpoint, d.request IS NULL ORDER BY d.next_at, d.request)
                     ELSE (row_number() OVER (PARTITION BY d.endpoint, d.request IS NULL ORDER BY d.next_at, d.id) - 1)
                          / d.batch + 1 END AS place
    FROM due d
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
    WHERE t.turn <= $7
)
UPDATE webhook_messages m
SET request = c.request, next_at = $2, leased_by = $1, leased_until = $3, attempts = m.attempts + 1
FROM chosen c, webhook_endpoints w
WHERE m.id = ANY (ARRAY (SELECT id FROM chosen)) AND m.id = c.id AND w.id = m.endpoint
RETURNING m.id, m.request, m.endpoint, w.tenant, w.url, w.batch, w.secret, w.previous_secret, w.previous_until,
          m.payload, m.attempts, m.created_at
