-- The first CSV row of an import that cannot be taken, with its line, why, and the
-- value at fault (none: all can be).
SELECT line, why, CASE field WHEN 'address' THEN address WHEN 'reason' THEN reason ELSE created END AS value
FROM (
    SELECT line, address, reason, created,
           CASE WHEN address IS NULL OR address !~ '^[^@\s]+@[^@\s]+$' THEN 'address'
                WHEN reason IS NOT NULL
                     AND reason NOT IN ('hard_bounce', 'soft_bounce', 'complaint', 'unsubscribe', 'manual')
                THEN 'reason'
                WHEN created IS NOT NULL AND NOT pg_input_is_valid(created, 'timestamptz') THEN 'created'
           END AS field
    FROM suppressions_import
) checked
JOIN (VALUES ('address', 'address: not an email address'),
             ('reason', 'reason: expected hard_bounce, soft_bounce, complaint, unsubscribe or manual'),
             ('created', 'created: not a time')) AS said (field, why) USING (field)
ORDER BY line
LIMIT 1
