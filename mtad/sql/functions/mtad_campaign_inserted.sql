-- New deliveries of campaigns (the accept) count in their buckets, and their messages.
CREATE OR REPLACE FUNCTION mtad_campaign_inserted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO campaign_moves (campaign, bucket, n)
    SELECT campaign, mtad_campaign_bucket(state, reason), count(*) FROM came
    WHERE campaign IS NOT NULL GROUP BY 1, 2
    UNION ALL
    SELECT campaign, 'messages', count(DISTINCT message) FROM came
    WHERE campaign IS NOT NULL GROUP BY 1;
    RETURN NULL;
END
$$;
