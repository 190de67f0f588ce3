-- Complaints (events $1) about deliveries $2 of messages $3, arrived at $4: each
-- counts, to the minute, for the warm-up of the source address and provider group
-- its delivery left from (warmup_complaints, read by egress/complaints.sql), and
-- one about mail relayed through a sending account lowers the account's health
-- (an account_bounce event with "complaint": true). Where the delivery left from
-- is its latest delivered event's.
WITH complaint AS (
    SELECT c.event, c.at, o.route_group, o.source, o.account
    FROM unnest($1::bigint[], $2::bigint[], $3::uuid[], $4::timestamptz[]) AS c (event, delivery, message, at)
    CROSS JOIN LATERAL (
        SELECT e.data ->> 'group' AS route_group, e.data ->> 'source' AS source, e.data ->> 'account' AS account
        FROM events e
        WHERE e.message = c.message AND e.delivery = c.delivery AND e.kind = 'delivered'
        ORDER BY e.id DESC LIMIT 1
    ) o
),
counted AS (
    INSERT INTO warmup_complaints AS w (address, provider, minute, complaints)
    SELECT c.source, c.route_group, date_trunc('minute', c.at), count(*)
    FROM complaint c
    WHERE c.source IS NOT NULL AND c.route_group IS NOT NULL
    GROUP BY c.source, c.route_group, date_trunc('minute', c.at)
    ON CONFLICT (address, provider, minute) DO UPDATE SET complaints = w.complaints + excluded.complaints
)
INSERT INTO events (at, kind, data)
SELECT c.at, 'account_bounce', jsonb_build_object('account', a.id, 'name', a.name, 'pool', a.pool,
                                                  'complaint', true, 'event', c.event)
FROM complaint c
JOIN accounts a ON a.name = c.account
