-- The cached MTA-STS policy of domain $1, expired or not (the caller compares).
SELECT domain, policy_id, mode, mx, max_age, fetched_at, expires_at, failure, failed_at
FROM mta_sts_policies WHERE domain = $1
