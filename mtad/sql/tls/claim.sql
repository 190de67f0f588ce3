-- Claim the report of ($1 day, $2 domain) as $3 (its id) at $4; no row: another node
-- made it already.
INSERT INTO tls_reports (day, domain, report_id, made_at) VALUES ($1, $2, $3, $4)
ON CONFLICT (day, domain) DO NOTHING
RETURNING report_id
