-- The last failure ($2, at $3) of domain $1's policy: a fetch, or a delivery held
-- to it. A domain with no policy cached gets a row of its failure alone.
INSERT INTO mta_sts_policies AS p (domain, failure, failed_at) VALUES ($1, $2, $3)
ON CONFLICT (domain) DO UPDATE SET failure = $2, failed_at = $3
