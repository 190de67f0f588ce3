-- The first CSV row of an import that cannot be taken, with why (none: all can):
-- its line is its position after the header.
SELECT n + 1 AS line, address, tenant, reason, created,
       CASE WHEN address IS NULL OR address !~ '^[^@\s]+@[^@\s]+$' THEN 'address: not an email address'
            WHEN reason IS NOT NULL
                 AND reason NOT IN ('hard_bounce', 'soft_bounce', 'complaint', 'unsubscribe', 'manual')
            THEN 'reason: expected hard_bounce, soft_bounce, complaint, unsubscribe or manual'
            WHEN created IS NOT NULL AND NOT pg_input_is_valid(created, 'timestamptz')
            THEN 'created: not a time' END AS why
FROM (SELECT row_number() OVER () AS n, * FROM suppressions_import) r
WHERE address IS NULL OR address !~ '^[^@\s]+@[^@\s]+$'
   OR (reason IS NOT NULL AND reason NOT IN ('hard_bounce', 'soft_bounce', 'complaint', 'unsubscribe', 'manual'))
   OR (created IS NOT NULL AND NOT pg_input_is_valid(created, 'timestamptz'))
ORDER BY n
LIMIT 1
