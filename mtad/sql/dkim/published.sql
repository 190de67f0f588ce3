-- Pending key $1 was seen published in DNS at $2 with TTL $3 (kept from the first
-- sighting); $2 NULL: it is not (or no longer) published. Returns its id.
UPDATE dkim_keys
SET published_at = CASE WHEN $2::timestamptz IS NULL THEN NULL ELSE coalesce(published_at, $2) END,
    published_ttl = CASE WHEN $2::timestamptz IS NULL THEN NULL ELSE coalesce(published_ttl, $3) END
WHERE id = $1 AND state = 'pending'
RETURNING id
