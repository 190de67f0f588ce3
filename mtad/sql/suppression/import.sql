-- Move the rows of suppressions_import into the lists, at $1 when a row gives no
-- time: a new (tenant, address) is added (tenant empty: the global list; reason
-- empty: manual), one already there is left as it is. Returns how many were added.
WITH added AS (
    INSERT INTO suppressions (tenant, address, reason, detail, created_at)
    SELECT DISTINCT ON (coalesce(tenant, ''), lower(address))
           coalesce(tenant, ''), lower(address), coalesce(nullif(reason, ''), 'manual'), 'imported',
           coalesce(nullif(created, '')::timestamptz, $1)
    FROM suppressions_import
    ORDER BY coalesce(tenant, ''), lower(address)
    ON CONFLICT (tenant, address) DO NOTHING
    RETURNING 1
)
SELECT count(*) FROM added
