-- What came back about a campaign's mail (an event of the message) counts by kind;
-- an open or a click a machine made ("machine": true) as KIND:machine, apart.
-- Each event's message is looked up by its key (a scalar subquery): never a join
-- the planner could make a scan of messages.
-- Events of no such kind (received, delivered, ...: most) return after one look.
CREATE OR REPLACE FUNCTION mtad_campaign_heard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NOT EXISTS (
        SELECT FROM written WHERE kind IN ('complained', 'unsubscribed', 'replied', 'opened', 'clicked')
    ) THEN
        RETURN NULL;
    END IF;
    INSERT INTO campaign_moves (campaign, bucket, n)
    SELECT campaign, kind, count(*)
    FROM (
        SELECT (SELECT m.campaign FROM messages m WHERE m.id = e.message) AS campaign,
               e.kind || CASE WHEN e.kind IN ('opened', 'clicked') AND (e.data->>'machine')::boolean
                              THEN ':machine' ELSE '' END AS kind
        FROM written e
        WHERE e.kind IN ('complained', 'unsubscribed', 'replied', 'opened', 'clicked') AND e.message IS NOT NULL
    ) heard
    WHERE campaign IS NOT NULL
    GROUP BY 1, 2;
    RETURN NULL;
END
$$;
