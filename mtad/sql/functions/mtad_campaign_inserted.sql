-- New deliveries of campaigns (the accept) count in their buckets, and their messages.
-- A batch with no campaign's mail returns after one look at its rows: the insert's
-- plan would cost three times as much, for every accept.
CREATE OR REPLACE FUNCTION mtad_campaign_inserted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NOT EXISTS (SELECT FROM came WHERE campaign IS NOT NULL) THEN
        RETURN NULL;
    END IF;
    INSERT INTO campaign_moves (campaign, bucket, n)
    SELECT campaign, mtad_campaign_bucket(state, reason), count(*) FROM came
    WHERE campaign IS NOT NULL GROUP BY 1, 2
    UNION ALL
    SELECT campaign, 'messages', count(DISTINCT message) FROM came
    WHERE campaign IS NOT NULL GROUP BY 1;
    RETURN NULL;
END
$$;
