-- Add sessions to the day's counts: $1 days, $2 domains, $3 policy types, $4 results,
-- $5 MX hosts, $6 receiving addresses, $7 sending addresses, $8 details, $9 sessions.
INSERT INTO tls_report_counts AS c (day, domain, policy_type, result, mx_host, receiving_ip, sending_ip, detail,
                                    sessions)
SELECT * FROM unnest($1::date[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[],
                     $8::text[], $9::bigint[])
ON CONFLICT (day, domain, policy_type, result, mx_host, receiving_ip, sending_ip) DO UPDATE
    SET sessions = c.sessions + excluded.sessions,
        detail = CASE WHEN excluded.detail = '' THEN c.detail ELSE excluded.detail END
