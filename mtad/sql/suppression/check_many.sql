-- For each (tenant $1[i], address $2[i]): whether the address is suppressed for the
-- tenant (its list or the global one) at $3. One row per pair, in order.
SELECT i.n, EXISTS (
    SELECT 1 FROM suppressions s
    WHERE s.tenant IN (i.tenant, '') AND s.address = lower(i.address)
      AND (s.expires_at IS NULL OR s.expires_at > $3)
) AS suppressed
FROM unnest($1::text[], $2::text[]) WITH ORDINALITY AS i (tenant, address, n)
ORDER BY i.n
