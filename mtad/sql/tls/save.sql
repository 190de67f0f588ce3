-- The policy of domain $1 as fetched at $6 for TXT id $2: mode $3, mx patterns $4,
-- max_age $5 seconds. Replaces the one cached, and forgets its last failure.
INSERT INTO mta_sts_policies AS p (domain, policy_id, mode, mx, max_age, fetched_at, expires_at)
VALUES ($1, $2, $3, $4, $5::integer, $6::timestamptz, $6::timestamptz + $5::integer * interval '1 second')
ON CONFLICT (domain) DO UPDATE
    SET policy_id = excluded.policy_id, mode = excluded.mode, mx = excluded.mx, max_age = excluded.max_age,
        fetched_at = excluded.fetched_at, expires_at = excluded.expires_at, failure = NULL, failed_at = NULL
