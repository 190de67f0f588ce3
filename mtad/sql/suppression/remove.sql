-- Remove address $2 from tenant $1's list ('': the global one); returns what was removed.
DELETE FROM suppressions WHERE tenant = $1 AND address = lower($2)
RETURNING tenant, address, reason
