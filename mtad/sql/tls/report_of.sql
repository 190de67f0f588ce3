-- The report made of ($1 day, $2 domain), if any.
SELECT day, domain, report_id, made_at, sent_to, failures FROM tls_reports WHERE day = $1 AND domain = $2
