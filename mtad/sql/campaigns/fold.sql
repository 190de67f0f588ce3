-- Fold up to $1 campaign moves into the counts and the minutes, in one transaction
-- (a read sums both tables, so it sees each move once); forget the minutes and the
-- counts of sends (of the campaigns' limits) before $2.
-- Two folds at once each take different moves: a row already deleted is skipped.
-- Returns how many moves were folded.
WITH gone AS (
    DELETE FROM campaign_moves
    WHERE ctid = ANY(ARRAY(SELECT ctid FROM campaign_moves LIMIT $1))
    RETURNING campaign, bucket, n, at
),
counted AS (
    INSERT INTO campaign_counts AS c (campaign, bucket, n)
    SELECT campaign, bucket, sum(n) FROM gone GROUP BY 1, 2
    ON CONFLICT (campaign, bucket) DO UPDATE SET n = c.n + excluded.n
),
minutes AS (
    INSERT INTO campaign_minutes AS m (campaign, minute, settled)
    SELECT campaign, date_trunc('minute', at), sum(n) FROM gone
    WHERE bucket IN ('delivered', 'failed') OR bucket LIKE 'bounced:%'
    GROUP BY 1, 2
    ON CONFLICT (campaign, minute) DO UPDATE SET settled = m.settled + excluded.settled
),
forgotten AS (
    DELETE FROM campaign_minutes WHERE minute < $2
),
forgotten_sends AS (
    DELETE FROM campaign_sends WHERE hour < $2
)
SELECT count(*) FROM gone
