-- Where the report of ($1 day, $2 domain) went ($3) and why not elsewhere ($4); then
-- the counts and reports past their keeping ($5 days) go.
WITH kept AS (
    UPDATE tls_reports SET sent_to = $3, failures = $4 WHERE day = $1 AND domain = $2
),
old_counts AS (
    DELETE FROM tls_report_counts WHERE day < $1::date - $5::integer
)
DELETE FROM tls_reports WHERE day < $1::date - $5::integer
