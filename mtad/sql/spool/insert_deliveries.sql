-- One queued delivery per recipient, due now.
INSERT INTO deliveries (message, recipient, domain, priority, next_attempt_at, created_at, updated_at)
SELECT d.message, d.recipient, d.domain, d.priority, d.at, d.at, d.at
FROM unnest($1::uuid[], $2::text[], $3::text[], $4::smallint[], $5::timestamptz[])
     AS d (message, recipient, domain, priority, at)
