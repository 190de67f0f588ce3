-- Every suppression as CSV rows: address, tenant ('' : the global list), reason, created.
SELECT address, tenant, reason, created_at AS created FROM suppressions ORDER BY tenant, address
