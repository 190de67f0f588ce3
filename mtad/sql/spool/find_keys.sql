-- The messages that own the given (tenant, key) pairs.
SELECT k.tenant, k.key, k.message
FROM idempotency_keys k
JOIN unnest($1::text[], $2::text[]) AS wanted (tenant, key)
  ON k.tenant = wanted.tenant AND k.key = wanted.key
