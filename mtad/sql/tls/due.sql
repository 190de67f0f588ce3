-- The (day, domain) pairs with sessions counted from day $1 to before day $2 and no
-- report made yet.
SELECT DISTINCT c.day, c.domain
FROM tls_report_counts c
WHERE c.day >= $1::date AND c.day < $2::date
  AND NOT EXISTS (SELECT 1 FROM tls_reports r WHERE r.day = c.day AND r.domain = c.domain)
ORDER BY c.day, c.domain
