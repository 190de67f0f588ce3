-- Every cached MTA-STS policy, by domain.
SELECT domain, policy_id, mode, mx, max_age, fetched_at, expires_at, failure, failed_at
FROM mta_sts_policies ORDER BY domain
