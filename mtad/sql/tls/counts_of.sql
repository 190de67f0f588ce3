-- The counts of ($1 day, $2 domain).
SELECT policy_type, result, mx_host, receiving_ip, sending_ip, detail, sessions
FROM tls_report_counts WHERE day = $1 AND domain = $2
ORDER BY policy_type, result, mx_host, receiving_ip, sending_ip
