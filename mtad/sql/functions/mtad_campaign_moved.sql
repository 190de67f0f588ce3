-- What a statement moved between buckets, netted per campaign: a lease (queued to
-- queued) or a renewal adds nothing. A delivery's campaign never changes, so rows
-- with none in `became` had none in `was`: such a statement returns after one look.
CREATE OR REPLACE FUNCTION mtad_campaign_moved() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NOT EXISTS (SELECT FROM became WHERE campaign IS NOT NULL) THEN
        RETURN NULL;
    END IF;
    INSERT INTO campaign_moves (campaign, bucket, n)
    SELECT campaign, bucket, sum(n) FROM (
        SELECT campaign, mtad_campaign_bucket(state, reason) AS bucket, -1 AS n FROM was
        WHERE campaign IS NOT NULL
        UNION ALL
        SELECT campaign, mtad_campaign_bucket(state, reason), 1 FROM became WHERE campaign IS NOT NULL
    ) moved
    GROUP BY 1, 2 HAVING sum(n) <> 0;
    RETURN NULL;
END
$$;
