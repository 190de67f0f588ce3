-- Claim idempotency keys for a batch of new messages. Returns the keys this
-- transaction now owns (new, or taken over from an expired entry); a key still
-- owned by an unexpired entry is not returned: its message is a duplicate.
-- $1 tenants, $2 keys, $3 message ids, $4 expiry times, $5 now.
INSERT INTO idempotency_keys AS k (tenant, key, message, expires_at)
SELECT * FROM unnest($1::text[], $2::text[], $3::uuid[], $4::timestamptz[])
ON CONFLICT (tenant, key) DO UPDATE
    SET message = excluded.message, expires_at = excluded.expires_at
    WHERE k.expires_at <= $5
RETURNING k.tenant, k.key
